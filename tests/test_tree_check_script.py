"""The CPU side of tests/gpu/tree_check.py (issue #26): its tree files, its sweep grids (valid, and the
cases they should hold), the tables and problems it derives from rows, and the per-step mask timing."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from report_synth import case, row, write_run

from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.cases.trees import check_parents, read_tree_file
from kbench.runs.store import load_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tc():
    spec = importlib.util.spec_from_file_location("tree_check", ROOT / "tests" / "gpu" / "tree_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tree_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def scenario_of(args: list[str]):
    """The scenario a sweep command line would run (its axis flags through apply_overrides)."""
    axes, i = {}, 0
    while i < len(args):
        flag = args[i]
        if flag == "--allow-wrong":
            i += 1
            continue
        axes[flag.lstrip("-").replace("-", "_")] = args[i + 1]
        i += 2
    sc = load_scenario(axes.pop("scenario"))
    for k in ("out", "name", "min_time"):
        axes.pop(k, None)
    if "budget" in axes:
        axes["budget_s"] = float(axes.pop("budget"))
    return apply_overrides(sc, **axes)


def test_tree_files_hold_stars_and_random_trees(tc, tmp_path):
    files = tc.write_tree_files(tmp_path)
    for n in tc.SIZES:
        assert read_tree_file(str(files["star"][n])) == [(-1,) + (0,) * (n - 1)]
        rand = read_tree_file(str(files["random"][n]))
        assert len(rand) == 5 and all(len(t) == n and check_parents(list(t)) is None for t in rand)
        assert len(set(rand)) == 5


def test_sweep_grids_are_valid_and_hold_the_cases_asked_for(tc, tmp_path):
    cmds = tc.sweep_commands(tmp_path, tc.write_tree_files(tmp_path / "trees"), 0.5)
    timing = scenario_of(cmds["timing"]).cases()
    assert {(c.batch_size, c.q_len, c.kv_len, c.tree) for c in timing} == {
        (bs, n, 4096, t) for bs in (16, 64) for n in (8, 16, 32, 64) for t in ("chain", "topk:4")}
    check = scenario_of(cmds["check"]).cases()
    kinds = {(tc.tree_kind(c.tree), c.q_len) for c in check}
    assert kinds == {(k, n) for k in ("topk:2", "topk:8", "star", "random") for n in (8, 16, 32, 64)}
    assert all(c.tree != "chain" for c in check)  # chains come from the timing sweep (and need no other kernel)
    ragged = scenario_of(cmds["ragged"]).cases()
    assert len(ragged) == 2 and all(c.q_dist == "accept:0.7" and c.kv_dist == "lognormal:1.0" for c in ragged)


def timing_rows(wrong=False):
    rows = []
    for bs in (16, 64):
        for n in (8, 16):
            chain, tree = case(bs, n, 4096), case(bs, n, 4096, tree="topk:4")
            rows += [row("trtllm-decode", chain, 10.0 * n), row("fa2-prefill", chain, 9.0 * n),
                     row("trtllm-decode", tree, 10.0 * n),
                     row("fa2-prefill", tree, 18.0 * n, status="wrong" if wrong and n == 16 else "ok")]
    return rows


def test_timing_table_winner_margin_and_cost(tc, tmp_path):
    rows = load_run(write_run(tmp_path / "run", timing_rows())).rows
    headers, table, problems = tc.timing_table(rows)
    assert problems == [] and len(table) == 4
    first = dict(zip(headers, table[0]))
    assert first["bs"] == "16" and first["n"] == "8"
    assert first["tree winner"] == "xqa by 80.0%" and first["chain winner"] == "fa2 by 11.1%"
    assert first["tree cost"] == "1.11x" and first["fa2 tree/chain"] == "2.00x" and first["xqa tree/chain"] == "1.00x"


def test_problems_a_wrong_kernel_and_a_kernel_that_ran_a_tree(tc, tmp_path):
    rows = timing_rows(wrong=True) + [row("decode-wrapper", case(16, 8, 4096, tree="topk:4"), 5.0)]
    rows = load_run(write_run(tmp_path / "run", rows)).rows
    _, _, problems = tc.timing_table(rows)
    assert any("bs 16 n 16: no ok time for fa2 tree" in p for p in problems)
    _, table, problems = tc.check_table(rows)
    assert any(p.startswith("fa2-prefill topk:4") and "wrong" in p for p in problems)
    assert any(p.startswith("decode-wrapper topk:4: expected a tree skip") for p in problems)
    ok = load_run(write_run(tmp_path / "ok", [
        row("fa2-prefill", case(4, 8, 1024, tree="topk:2"), 5.0),
        row("fa3-prefill", case(4, 8, 1024, tree="topk:2"), None, status="skipped", reason="tree: FA3 takes none")])).rows
    assert tc.check_table(ok)[2] == []


def test_mask_times_on_the_cpu(tc):
    headers, table, problems = tc.mask_times(["cpu"], batches=(2,), sizes=(8, 33), kv=256, reps=2)
    assert headers == ["bs", "n", "depth", "cpu xqa us", "cpu fa2+pack us"] and problems == []
    assert [r[:2] for r in table] == [["2", "8"], ["2", "33"]] and all(float(r[3]) > 0 for r in table)


def test_main_masks_only_writes_the_table(tc, tmp_path, capsys):
    assert tc.main(["--out", str(tmp_path), "--masks-only", "--reps", "1"]) == 0
    text = (tmp_path / "tree_check.txt").read_text()
    assert "per-step masks" in text and text.strip().endswith("problems: none")


def test_importing_the_script_keeps_pythons_sigpipe_handling(tc):
    """The script ends quietly when piped to head only when run as a script: imported (as here), it must leave
    SIGPIPE ignored as Python sets it, or a later write to a closed socket kills the whole test run."""
    import signal

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
