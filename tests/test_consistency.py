"""Issue #17, consistency and the smaller items: one spelling per concept (old ones kept hidden), help on
every option and examples closing every command's --help, honest messages, and plots a reader understands."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kbench.cli.main import COMMANDS, cli
from kbench.runs.store import load_run

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "results" / "baselines" / "h200-draft-extend-kv4096"
TINY = ["-b", "1", "-q", "1,2", "-k", "64", "--budget", "0.02", "--kernels", "reference"]
OURS = list(COMMANDS)  # every command, server-bench included


def run_cli(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def one_error_line(r, code=2):
    assert r.exit_code == code, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def command(name) -> click.Command:
    return cli.get_command(click.Context(cli), name)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    r = run_cli(["report", BASELINE, "--out", out])
    assert r.exit_code == 0, r.output
    return out / "policy.json"


# ---- help on every option, examples at the end of every --help ---------------------------------------


# ---- one spelling per concept; old spellings still work, unseen ---------------------------------------
def test_select_takes_kv_layout_like_sweep_and_layout_still_works_hidden(policy):
    args = ["select", "--policy", policy, "--batch-size", "16", "--q-len", "4", "--kv-len", "4096"]
    new = run_cli([*args, "--kv-layout", "HND"])
    old = run_cli([*args, "--layout", "HND"])
    assert new.exit_code == old.exit_code == 0 and new.output == old.output
    help_text = run_cli(["select", "--help"]).output
    assert "--kv-layout" in help_text and "--layout" not in help_text.replace("--kv-layout", "")
    assert "--kv-layout" in run_cli(["sweep", "--help"]).output


def test_heads_are_written_qo_kv_dim_everywhere():
    for name in ("sweep", "select"):
        text = run_cli([name, "--help"], env={"COLUMNS": "200"}).output
        assert "QO/KV/DIM" in text and "Q/KV/D," not in text, name


def test_baseline_out_is_the_folder_and_root_still_works(tmp_path):
    from gate_synth import sweep_rows, write_run

    run = write_run(tmp_path / "run", sweep_rows())
    assert run_cli(["baseline", run, "--name", "a", "--out", tmp_path / "bl"]).exit_code == 0
    assert run_cli(["baseline", run, "--name", "b", "--root", tmp_path / "bl"]).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "bl").iterdir()) == ["a", "b"]
    text = run_cli(["baseline", "--help"], env={"COLUMNS": "200"}).output
    assert "--out" in text and "--root TEXT" not in text and "--root DIRECTORY" not in text


def test_validate_timer_out_is_a_folder_and_a_json_path_keeps_its_old_meaning(tmp_path):
    from kbench.cli.validate_cmd import rows_file

    assert rows_file(str(tmp_path / "res")) == tmp_path / "res" / "validate-timer.json"
    assert rows_file(str(tmp_path / "vt.json")) == tmp_path / "vt.json"
    assert not (tmp_path / "res").exists()  # nothing made before there is something to write
    line = one_error_line(run_cli(["validate-timer", "--out", "/proc/kbench-vt"]))
    assert line.startswith("error: --out /proc/kbench-vt: cannot write there")


def test_device_and_devices_together_are_refused(tmp_path):
    line = one_error_line(run_cli(["sweep", *TINY, "--device", "0", "--devices", "0", "--out", tmp_path]))
    assert "--device and --devices: give one" in line
    assert list(tmp_path.iterdir()) == []


def test_gate_json_file_is_told_apart_from_the_json_flags():
    text = " ".join(run_cli(["gate", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--json FILE" in text and "take --json as a flag" in text


# ---- the smaller list ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, says", [("/tmp", "a folder, not a scenario file"),
                                         ("/dev/null", "not a regular file")])
def test_scenario_that_is_a_folder_or_a_device_says_what_it_is(path, says):
    line = one_error_line(run_cli(["sweep", "-s", path]))
    assert says in line and "does not exist" not in line


def test_utf8_bom_scenario_loads(tmp_path):
    from kbench.cases.scenario import load_scenario

    text = 'model = "llama3-8b"\n[grid]\nbatch_size = [1]\nq_len = [1, 2]\nkv_len = [64]\n'
    (tmp_path / "plain.toml").write_text(text, encoding="utf-8")
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_scenario(str(tmp_path / "bom.toml")).cases() == load_scenario(str(tmp_path / "plain.toml")).cases()


def test_select_error_names_the_options_not_a_python_dict(policy):
    line = one_error_line(run_cli(["select", "--policy", policy, "--batch-size", "16", "--q-len", "4",
                                   "--kv-len", "4096", "--heads", "64/8/128", "--dtype", "fp16"]))
    assert "--heads 64/8/128 --dtype fp16" in line and "{" not in line and "'" not in line


def test_non_ascii_name_is_said_not_silently_changed(tmp_path):
    r = run_cli(["sweep", *TINY, "--name", "тест🚀 run", "--out", tmp_path])
    assert r.exit_code == 0, r.output
    assert "note: --name 'тест🚀 run' is written as 'run'" in r.output
    assert [p.name.startswith("run-") for p in tmp_path.iterdir()] == [True]


def test_heads_with_model_is_refused(tmp_path):
    line = one_error_line(run_cli(["sweep", *TINY, "--model", "llama3-70b-tp8", "--heads", "32/8/128",
                                   "--out", tmp_path]))
    assert "--model llama3-70b-tp8 and --heads 32/8/128 both set the heads" in line and "give one" in line
    assert list(tmp_path.iterdir()) == []


def test_select_extrapolate_refuses_q_len_above_kv_len(policy):
    line = one_error_line(run_cli(["select", "--policy", policy, "--batch-size", "16", "--q-len", "40",
                                   "--kv-len", "8", "--extrapolate"]))
    assert "q_len 40 > kv_len 8" in line


def test_report_wrote_line_names_every_file_it_counts(tmp_path):
    r = run_cli(["report", BASELINE, "--out", tmp_path / "rep"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("wrote "))
    files = sorted(p.name for p in (tmp_path / "rep").iterdir())
    n_plots = sum(f.endswith(".png") for f in files)
    assert line.startswith(f"wrote {len(files)} files")
    for f in files:
        assert f.endswith(".png") or f in line, f
    assert line.endswith(f"{n_plots} plots")


def test_kernels_table_names_a_backend_on_a_cpu():
    r = run_cli(["kernels", "--json"])
    assert r.exit_code == 0, r.output
    data = {k["kernel"]: k for k in json.loads(r.output)["kernels"]}
    assert all(k["backend"] for k in data.values())
    assert "xqa" in data["trtllm-decode"]["backend"] and "trtllm-gen" in data["trtllm-decode"]["backend"]


# ---- plots and the summary ------------------------------------------------------------------------------
def test_time_vs_q_defaults_to_the_slice_where_the_winner_changes(tmp_path):
    from kbench.report.plots import default_points, winner_changes

    ok = load_run(BASELINE).rows
    ok = ok[ok["status"] == "ok"]
    changes = winner_changes(ok)
    assert changes[(64, 4096)][0] == 0 < changes[(16, 4096)][0]  # bs 64: every kernel ties; bs 16: decode wins q 1-8
    assert default_points(ok) == [(16, 4096)]
    r = run_cli(["report", BASELINE, "--out", tmp_path / "rep"])
    assert r.exit_code == 0, r.output
    assert [p.name.split("-32")[0] for p in (tmp_path / "rep").glob("time-vs-q-*.png")] == ["time-vs-q-bs16-kv4096"]


def test_time_vs_q_gives_each_kernel_its_own_marker_and_labels_steps_above_the_plot(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from kbench.report import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    ok = load_run(BASELINE).rows
    plots.time_vs_q(ok[ok["status"] == "ok"], [(16, 4096)], tmp_path)
    (fig,) = figs
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    markers = {c.get_label(): c.lines[0].get_marker() for c in ax.containers}  # one errorbar per kernel
    assert len(set(markers.values())) == len(markers) >= 5, markers
    assert markers["decode-wrapper (decode)"] != markers["fa2-prefill (context)"]
    assert not [t for t in ax.texts if "q·G" in t.get_text()]  # no label inside the plot area
    top = ax.child_axes  # the secondary x axis on top
    assert top and any("q·G=16" in t.get_text() for a in top for t in a.get_xticklabels())


def test_summary_says_how_ties_are_served(tmp_path):
    r = run_cli(["report", BASELINE, "--out", tmp_path / "rep"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "report.md").read_text()
    policy = json.loads((tmp_path / "rep" / "policy.json").read_text())
    cells = [c for g in policy["groups"] for c in g["cells"] if c["tie"]]
    to_context = sum(c["path"] == "context" for c in cells)
    to_decode = sum(c["path"] == "decode" for c in cells)
    said = (f"the policy then serves the kernel with the faster median anyway, here {to_context} to the context "
            f"path and {to_decode} to the decode path")
    assert said in md and said in " ".join(r.output.split())
    assert to_context > 0  # the committed baseline: ties served by fa2 (context)


def test_heatmap_is_one_panel_per_kv_len_with_q_len_along_x(tmp_path, monkeypatch):
    """The committed baseline has one kv_len: one panel of 2 x 16 cells (was 16 panels of two cells)."""
    from kbench.report import plots
    from kbench.runs.winners import case_winners

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    plots.speedup_heatmaps(case_winners(load_run(BASELINE).rows), tmp_path)
    (fig,) = figs
    panels = [a for a in fig.axes if a.get_images()]
    assert len(panels) == 1
    (ax,) = panels
    assert ax.get_title() == "kv_len 4096" and ax.get_xlabel().startswith("q_len")
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(q) for q in range(1, 17)]
    assert len(ax.texts) == 32  # every cell annotated

