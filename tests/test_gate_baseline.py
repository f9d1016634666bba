"""kbench baseline RUN --name NAME: a committed copy of the run under results/baselines/NAME, and what it refuses
(a run without ok rows, a running run unless --allow-partial, duplicate rows, replacing a baseline without --force)."""
from __future__ import annotations

import json

from click.testing import CliRunner
from gate_synth import CASE_A, CONTEXT, DECODE, gate_json, sweep_rows, with_time, write_run
from helpers import one_error_line, run_cli, tree

from kbench.gate.baselines import write_baseline
from kbench.cli.gate_cmd import baseline
from kbench.runs.store import load_run


def _baseline(*args):
    return CliRunner().invoke(baseline, [str(a) for a in args])


def test_baseline_written_and_gateable(tmp_path):
    run = write_run(tmp_path / "run", sweep_rows(seed=1, overrides={(CONTEXT, CASE_A): {"status": "wrong"}}))
    root = tmp_path / "results" / "baselines"
    res = _baseline(run, "--name", "h200 quick", "--root", root)
    assert res.exit_code == 0, res.output
    dest = root / "h200-quick"
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json", "rows.csv", "rows.parquet"]
    m = json.loads((dest / "manifest.json").read_text())
    assert m["baseline"]["source_run"] == str(run) and m["baseline"]["num_rows"] == 6
    assert m["device"] == {"name": "NVIDIA H200", "sm": 90} and m["kind"] == "sweep"
    loaded, src = load_run(dest), load_run(run)
    assert len(loaded.rows) == len(src.rows)
    assert sorted(loaded.rows["status"]) == sorted(src.rows["status"])  # wrong rows are kept too
    assert list(loaded.rows["samples_us"].iloc[0]) == list(src.rows["samples_us"].iloc[0])
    assert gate_json(tmp_path, dest, run)[0].exit_code == 0


def test_baseline_refresh_after_improvement(tmp_path):
    root = tmp_path / "baselines"
    old = write_run(tmp_path / "old", sweep_rows(seed=1))
    new = write_run(tmp_path / "new", sweep_rows(with_time(DECODE, CASE_A, 0.7), seed=2))
    dest = write_baseline(load_run(old), "main", root)
    res, data = gate_json(tmp_path, dest, new)
    assert res.exit_code == 0 and data["counts"]["improvement"] == 1
    write_baseline(load_run(new), "main", root, force=True)
    assert json.loads((dest / "manifest.json").read_text())["baseline"]["source_run"] == str(new)
    # against the refreshed baseline the old, slower run is now a regression
    assert gate_json(tmp_path, dest, old)[0].exit_code == 1


def test_baseline_name_cannot_escape(tmp_path):
    run = write_run(tmp_path / "run", sweep_rows(seed=1))
    root = tmp_path / "baselines"
    for bad in ("../evil", "a/b", "..", "/abs", ""):
        res = _baseline(run, "--name", bad, "--root", root)
        assert res.exit_code == 2, (bad, res.output)
        assert res.stderr.startswith("error: ") and "Traceback" not in res.output
    assert not (tmp_path / "evil").exists() and not root.exists()


def test_baseline_refuses_foreign_folder_and_bad_run(tmp_path):
    run = write_run(tmp_path / "run", sweep_rows(seed=1))
    root = tmp_path / "baselines"
    (root / "taken").mkdir(parents=True)
    (root / "taken" / "notes.txt").write_text("not a baseline")
    res = _baseline(run, "--name", "taken", "--root", root)
    assert res.exit_code == 2 and "not a kbench baseline" in res.stderr
    res = _baseline(tmp_path / "nope", "--name", "x", "--root", root)
    assert res.exit_code == 2 and "no such run" in res.stderr


# ---- what kbench baseline refuses ----------------------------------------------------------------------
def test_baseline_refuses_a_run_without_ok_rows(tmp_path):
    run = write_run(tmp_path / "run", [r for r in sweep_rows(seed=1) if r.kernel == "zzz"])
    line = one_error_line(run_cli(["baseline", run, "--name", "b", "--root", tmp_path / "bl"]))
    assert "no ok row" in line and not (tmp_path / "bl").exists()


def test_baseline_refuses_a_running_run_unless_allow_partial(tmp_path):
    from kbench.runs.store import RunWriter

    w = RunWriter(tmp_path / "run", {"kind": "sweep", "device": {"name": "NVIDIA H200", "sm": 90}})
    for row in sweep_rows(seed=1):
        w.append(row)
    w._journal.close()
    w.release()  # left 'running', as a sweep still going (or killed) leaves it
    line = one_error_line(run_cli(["baseline", tmp_path / "run", "--name", "b", "--root", tmp_path / "bl"]))
    assert "'running'" in line and "--allow-partial" in line
    assert f"kbench sweep --resume {tmp_path / 'run'}" in line
    r = run_cli(["baseline", tmp_path / "run", "--name", "b", "--root", tmp_path / "bl", "--allow-partial"])
    assert r.exit_code == 0, r.output


def test_baseline_of_an_interrupted_server_bench_run_names_the_server_bench_resume(tmp_path):
    from test_gate_server import ensure_server_kind, server_row

    from kbench.runs.store import RunWriter

    ensure_server_kind()
    w = RunWriter(tmp_path / "sb", {"kind": "server-bench", "status": "interrupted"})
    w.append(server_row("bs1-in512-out32"))
    w._journal.close()
    w.release()
    w = None
    man = json.loads((tmp_path / "sb" / "manifest.json").read_text())
    man["status"] = "interrupted"
    (tmp_path / "sb" / "manifest.json").write_text(json.dumps(man))
    line = one_error_line(run_cli(["baseline", tmp_path / "sb", "--name", "b", "--root", tmp_path / "bl"]))
    assert "'interrupted'" in line and f"kbench server-bench --resume {tmp_path / 'sb'} --url URL" in line
    assert "kbench sweep" not in line and not (tmp_path / "bl").exists()


def test_baseline_refuses_duplicate_rows(tmp_path):
    rows = sweep_rows(seed=1)
    run = write_run(tmp_path / "run", rows + [rows[0]])
    line = one_error_line(run_cli(["baseline", run, "--name", "b", "--root", tmp_path / "bl"]))
    assert "share a key" in line and DECODE in line


def test_baseline_never_replaced_without_force(tmp_path):
    good = write_run(tmp_path / "good", sweep_rows(seed=1))
    other = write_run(tmp_path / "other", sweep_rows(seed=2))
    assert run_cli(["baseline", good, "--name", "main", "--root", tmp_path / "bl"]).exit_code == 0
    before = tree(tmp_path / "bl")
    line = one_error_line(run_cli(["baseline", other, "--name", "main", "--root", tmp_path / "bl"]))
    assert "exists" in line and "--force" in line and tree(tmp_path / "bl") == before
    assert run_cli(["baseline", other, "--name", "main", "--root", tmp_path / "bl", "--force"]).exit_code == 0
    assert tree(tmp_path / "bl") != before


def test_a_baseline_of_a_resumed_run_killed_mid_way_loads_and_gates(tmp_path):
    """A run finalized once (num_rows N), resumed and killed: its journal holds more rows than num_rows says. A
    baseline of it (--allow-partial) keeps the run's manifest, num_rows N, beside tables of every row: it is read
    against its own count (baseline.num_rows), not refused as cut short."""
    from kbench.runs.store import RunWriter

    rows = sweep_rows(seed=1)
    w = RunWriter(tmp_path / "run", {"kind": "sweep", "device": {"name": "NVIDIA H200", "sm": 90}})
    for row in rows[:3]:
        w.append(row)
    w.finalize("interrupted")
    w = RunWriter(tmp_path / "run", {}, resume=True)
    for row in rows[3:]:
        w.append(row)
    w._journal.close()
    w.release()  # killed: still 'running', num_rows 3 from the first call
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["num_rows"] == 3
    r = run_cli(["baseline", tmp_path / "run", "--name", "b", "--root", tmp_path / "bl", "--allow-partial"])
    assert r.exit_code == 0, r.output
    assert len(load_run(tmp_path / "bl" / "b").rows) == len(rows)
    r = run_cli(["gate", "--baseline", tmp_path / "bl" / "b", "--candidate", tmp_path / "run"])
    assert r.exit_code == 0, r.output


def test_a_cpu_run_with_no_kernel_row_is_refused_as_a_baseline_saying_what_to_do(tmp_path, cpu_run):
    """A CPU sweep's only ok rows are the float32 reference, which the gate never compares: such a baseline
    would fail every gate with 'nothing compared'. Refused in one line (exit 2), nothing written, naming the
    committed baseline to gate on instead; the same from Python."""
    import pytest

    from kbench.errors import BadInput
    from kbench.gate.baselines import write_multi_baseline

    rows = load_run(cpu_run).rows
    assert set(rows[rows.status == "ok"].path) == {"reference"}
    line = one_error_line(_baseline(cpu_run, "--name", "cpu", "--out", tmp_path / "bl"))
    assert line.startswith(f"error: {cpu_run}: no kernel row to gate: its ") and "float32 reference (a CPU run" in line
    assert line.endswith("kbench gate --baseline results/baselines/h200-draft-extend-kv4096 "
                         "--candidate results/baselines/h200-draft-extend-kv4096")
    assert not (tmp_path / "bl" / "cpu").exists()
    with pytest.raises(BadInput, match="no kernel row to gate"):
        write_multi_baseline([cpu_run, cpu_run], "cpu2", root=tmp_path / "bl")
    assert not (tmp_path / "bl" / "cpu2").exists()
