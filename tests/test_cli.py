"""The command line as a whole: one spelling per concept (old ones still work, kept hidden), messages that say
what is wrong in the user's words, click's usage errors as one kbench line, and a closed pipe that is quiet.
(--help: test_help.py; outputs that cannot be written: test_outputs.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kbench.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "results" / "baselines" / "h200-draft-extend-kv4096"
TINY = ["-b", "1", "-q", "1,2", "-k", "64", "--budget", "0.02", "--kernels", "reference"]


def run_cli(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def one_error_line(r, code=2):
    assert r.exit_code == code, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep")
    r = run_cli(["report", BASELINE, "--out", out])
    assert r.exit_code == 0, r.output
    return out / "policy.json"


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


# ---- honest messages -------------------------------------------------------------------------------------
def test_select_error_names_the_options_not_a_python_dict(policy):
    line = one_error_line(run_cli(["select", "--policy", policy, "--batch-size", "16", "--q-len", "4",
                                   "--kv-len", "4096", "--heads", "64/8/128", "--dtype", "fp16"]))
    assert "--heads 64/8/128 --dtype fp16" in line and "{" not in line and "'" not in line


# every option naming a file or folder a command writes, with arguments that are otherwise valid
_B = str(BASELINE)
_REC = ["recommend", _B, "--engine", "sglang", "--batch-size", "16", "--q-len", "4", "--kv-len", "4096"]
_SERVER = ["server-bench", "--url", "http://127.0.0.1:9", "--batch-size", "1", "--input-len", "4", "--output-len", "2"]
OUTPUT_OPTIONS = {
    "gate": (["gate", "--baseline", _B, "--candidate", _B], ["--markdown", "--junit", "--json"]),
    "baseline": (["baseline", _B, "--name", "b"], ["--out", "--root"]),
    "report": (["report", _B], ["--out"]),
    "recommend": (_REC, ["--markdown"]),
    "export": (["export", _B], ["--out"]),
    "sweep": (["sweep", *TINY], ["--out", "--resume", "--jit-cache"]),
    "merge": (["merge", _B, _B], ["--out"]),
    "prebuild": (["prebuild", "-b", "1", "-q", "1", "-k", "64", "--kernels", "reference", "--list"],
                 ["--jit-cache", "--archive"]),
    "validate-timer": (["validate-timer"], ["--out"]),
    "server-bench": (_SERVER, ["--out", "--result-filename", "--resume"]),
    "layers": (["layers", "--model", "llama3-8b"], ["--out", "--resume"]),
}
# the options of type click.Path that name what a command reads (everything else of that type is an output)
INPUT_PATHS = {("report", "runs"), ("select", "policy_file"), ("merge", "runs"), ("recommend", "workload_file"),
               ("prebuild", "load"), ("prebuild", "include")}


@pytest.mark.parametrize("command, option", [(c, o) for c, (_, opts) in OUTPUT_OPTIONS.items() for o in opts])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_output_path_is_refused_by_every_command(tmp_path, monkeypatch, command, option, value):
    """An empty path was skipped as if not given (gate/recommend --markdown '') or read as the current folder
    (report --out ''): every output option refuses it alike, before anything runs or is written."""
    monkeypatch.chdir(tmp_path)
    args, _ = OUTPUT_OPTIONS[command]
    line = one_error_line(run_cli([*args, option, value]))
    flag = "--out" if option == "--root" else option  # --root: the old spelling of --out
    assert line.startswith(f"error: {flag}: an empty path; give a ") and f"(e.g. {flag} " in line, line
    assert list(tmp_path.iterdir()) == []


def test_every_output_option_is_in_the_empty_path_table():
    """A new option of type click.Path is either an OutputPath (refusing '') listed above, or an input listed in
    INPUT_PATHS (an output option needs a path type to be seen here: sweep --out, server-bench --out,
    --result-filename and --resume were plain strings before they became OutputPaths)."""
    import importlib

    from kbench.cli.main import COMMANDS
    from kbench.cli.options import OutputPath

    for name, (mod, attr, _) in COMMANDS.items():
        cmd = getattr(importlib.import_module(mod), attr)
        for p in cmd.params:
            if isinstance(p.type, OutputPath):
                assert name in OUTPUT_OPTIONS and p.opts[0] in OUTPUT_OPTIONS[name][1], (name, p.opts)
            elif isinstance(p.type, click.Path):
                assert (name, p.name) in INPUT_PATHS, f"{name} {p.opts}: an output? make it an OutputPath"


def test_every_number_option_is_ascii_only():
    """click's int and float types take '١٢' and '６４' (Python's int() and float() do): every number option uses
    kbench's types (cli.options INT, FLOAT, IntRange, FloatRange), which refuse them as the rest of kbench does."""
    import importlib

    from kbench.cli.main import COMMANDS
    from kbench.cli.options import _AsciiNumber

    numbers = []
    for name, (mod, attr, _) in COMMANDS.items():
        cmd = getattr(importlib.import_module(mod), attr)
        numbers += [(name, p) for p in cmd.params
                    if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))]
    assert len(numbers) >= 20, numbers  # the scan sees the commands' options
    for name, p in numbers:
        assert isinstance(p.type, _AsciiNumber), f"{name} {p.opts}: use cli.options' INT/FLOAT/IntRange/FloatRange"


@pytest.mark.parametrize("args", [["sweep", "-s", "quick", "--seed", "\u0661"], ["report", "x", "--max-rows", "\uff13"],
                                  ["validate-timer", "--tolerance", "\u0660.03"], ["prebuild", "--parallel", "\u0662"],
                                  ["server-bench", "--url", "http://127.0.0.1:9", "--seed", "\u0661"]])
def test_a_number_in_other_digits_is_one_line_exit_2(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    line = one_error_line(run_cli(args))
    assert "ASCII" in line or "not an integer" in line, line
    assert list(tmp_path.iterdir()) == []


def _select_filters() -> list[str]:
    from kbench.cli.report_cmd import select_cmd

    shape = {"policy_file", "batch_size", "q_len", "kv_len"}
    return [p.opts[0] for p in select_cmd.params if isinstance(p, click.Option) and not p.is_flag
            and p.name not in shape]


@pytest.mark.parametrize("flag", _select_filters())
@pytest.mark.parametrize("value", ["", "  "])
def test_select_refuses_an_empty_filter_value_instead_of_matching_any(policy, flag, value):
    assert len(_select_filters()) >= 14  # heads, dtype, kv-dtype, page-size, kv-layout and the realistic axes
    line = one_error_line(run_cli(["select", "--policy", policy, "--batch-size", "16", "--q-len", "4",
                                   "--kv-len", "4096", flag, value]))
    assert flag in line
    if flag != "--page-size":  # an integer option: click's own line ('' is not a valid integer)
        assert f"select: {flag}: an empty value; give one value, or leave {flag} out to match any" in line


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


def test_kernels_table_names_a_backend_on_a_cpu():
    r = run_cli(["kernels", "--json"])
    assert r.exit_code == 0, r.output
    data = {k["kernel"]: k for k in json.loads(r.output)["kernels"]}
    assert all(k["backend"] for k in data.values())
    assert "xqa" in data["trtllm-decode"]["backend"] and "trtllm-gen" in data["trtllm-decode"]["backend"]


# ---- usage errors and pipes -------------------------------------------------------------------------------
def test_click_usage_errors_are_one_kbench_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", "--no-such-option"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "error: No such option '--no-such-option'. (see kbench sweep --help)"] or (
        len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: No such option")), r.stderr
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "select", "--policy", "x"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Missing option" in r.stderr


def test_closed_pipe_is_quiet_and_exit_0(tmp_path):
    r = subprocess.run(f"{sys.executable} -m kbench.cli.main report {BASELINE} --out {tmp_path / 'rep'} | head -2",
                       shell=True, capture_output=True, text=True, executable="/bin/bash",
                       env={**os.environ, "COLUMNS": "80"})
    assert len(r.stdout.splitlines()) == 2 and r.stderr == "", r.stderr
    r = subprocess.run(f"set -o pipefail; {sys.executable} -m kbench.cli.main report {BASELINE} --out "
                       f"{tmp_path / 'rep'} | head -1 >/dev/null", shell=True, executable="/bin/bash")
    assert r.returncode == 0


# every command that takes a run folder, with RUN where it goes (recommend: a workload so the run is read)
TAKES_A_RUN = [
    ["report", "RUN"], ["gate", "--baseline", "RUN", "--candidate", BASELINE],
    ["gate", "--baseline", BASELINE, "--candidate", "RUN"], ["baseline", "RUN", "--name", "t", "--out", "bl"],
    ["merge", "RUN", BASELINE], ["recommend", "RUN", "--engine", "sglang", "--batch-size", "1", "--q-len", "1", "--kv-len", "64"],
    ["sweep", "--resume", "RUN"], ["server-bench", "--resume", "RUN", "--url", "http://127.0.0.1:9"],
]


@pytest.mark.parametrize("args", TAKES_A_RUN, ids=lambda a: " ".join(map(str, a[:2])))
def test_every_command_taking_a_run_says_the_same_of_a_missing_path_or_a_file(tmp_path, args):
    """sweep --resume and server-bench --resume said "not a kbench run (no manifest.json)" of a path that does not
    exist; report, gate, baseline, merge and recommend said "no such run folder" of a file. One check now."""
    (tmp_path / "afile").write_text("x\n")
    cases = [(tmp_path / "nope", "no such run folder"), (tmp_path / "afile", "a file, not a run folder")]
    for given, says in cases[:1] if args[0] == "recommend" else cases:  # recommend reads a file as a policy
        r = run_cli([given if a == "RUN" else a for a in args], catch_exceptions=False)
        line = one_error_line(r)
        assert line.endswith(f"{given}: {says}"), line
    assert not (tmp_path / "bl").exists()


_ARCHIVE_GRID = ["prebuild", "--arch", "9.0a", "--no-build"]


@pytest.mark.parametrize("args", [
    ["report", BASELINE, "--out", "rep", "--holdout", "0.5", "--seed", "-1"],  # was numpy's traceback
    ["validate-timer", "--tolerance", "nan"], ["validate-timer", "--tolerance", "0"],
    ["sweep", *TINY, "--adaptive", "--budget-minutes", "inf"],  # wrote Infinity into the manifest
    ["sweep", *TINY, "--slow-kernel", "reference=1001"],
    ["sweep", *TINY, "--seed", "1_000"], ["sweep", *TINY, "--budget", "1_0"],
    ["sweep", *TINY, "--kv-dist", "lognormal:\uff10.5"], ["sweep", *TINY, "--q-dist", "accept:\uff10.5"],
    ["sweep", *TINY, "--skip-softmax", "\uff11000"],
    ["gate", "--baseline", BASELINE, "--candidate", BASELINE, "--threshold", "\u0667%"],
    ["gate", "--baseline", BASELINE, "--candidate", BASELINE, "--noise-floor", "0.0\uff15"],
    ["recommend", BASELINE, "--engine", "sglang", "--batch-size", "16@\uff16", "--q-len", "4", "--kv-len", "4096"],
    ["recommend", BASELINE, "--engine", "sglang", "--batch-size", "16", "--q-len", "4", "--kv-len",
     "lognormal:\uff14096:0.5"],
    ["prebuild", "--arch", "\uff19.0a", "--list"],
    ["server-bench", "--url", "http://127.0.0.1:9", "--vocab-size", ""],
    ["server-bench", "--url", "http://127.0.0.1:9", "--repeat", "1_0"],
    [*_ARCHIVE_GRID, "--grid", "-s quick", "--grid", "--help", "--archive", "a.tgz"],  # was help and exit 0
    [*_ARCHIVE_GRID, "--grid", "-h", "--archive", "a.tgz"], [*_ARCHIVE_GRID, "--grid", "  ", "--archive", "a.tgz"],
    [*_ARCHIVE_GRID, "--kernels", "nosuch", "--archive", "nd/a.tgz"],  # left ./nd behind
    ["prebuild", "--arch", "99.9z", "--no-build", "--archive", "nd/a.tgz"],
    ["sweep", *TINY, "--kernels", "nosuch", "--jit-cache", "jc"],  # left an empty ./jc behind
])
def test_hostile_inputs_of_this_round_are_one_line_and_write_nothing(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path.parent / f"{tmp_path.name}-jit"))
    if args[0] == "prebuild":  # FlashInfer in this process reads the target once: each case in its own process
        r = subprocess.run([sys.executable, "-m", "kbench.cli.main", *[str(a) for a in args]], capture_output=True,
                           text=True, timeout=120, env=os.environ)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    else:
        one_error_line(run_cli(args))
    assert list(tmp_path.iterdir()) == []


def test_devices_take_ascii_digits_only():
    from kbench.engine.shards import parse_devices
    from kbench.errors import BadInput

    assert parse_devices("0, 1", 2) == [0, 1]
    for bad in ("\uff10,\uff11", "\u0661", "1_0", "+1"):
        with pytest.raises(BadInput, match="--devices"):
            parse_devices(bad, 2)


def test_outputs_made_on_the_way_are_removed_when_the_command_fails(tmp_path, monkeypatch):
    # report --out o/a/b with an unmeasured --plot-batch left o/a; server-bench --out made its folder before it
    # reached the server
    monkeypatch.chdir(tmp_path)
    one_error_line(run_cli(["report", BASELINE, "--out", "o/a/b", "--plot-batch", "7", "--plot-kv", "5"]))
    r = run_cli(["server-bench", "--url", "http://127.0.0.1:9", "--out", "s/deep/er"])
    assert r.exit_code == 1 and "cannot use the server" in r.output, r.output
    for bad in (["--seed", "-1"], ["--prompt-pattern", "repeat:\uff15"], ["--prompt-pattern", "repeat:99999999999"]):
        one_error_line(run_cli(["server-bench", "--url", "http://127.0.0.1:9", *bad]))
    assert list(tmp_path.iterdir()) == []


def test_progress_period_from_the_environment_is_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for bad in ("abc", "nan", "-1", "\u0661", "1_0"):
        monkeypatch.setenv("KBENCH_PROGRESS_S", bad)
        r = run_cli(["sweep", *TINY, "--out", "o"])
        assert r.exit_code == 2 and r.output.strip().splitlines() == [
            f"error: KBENCH_PROGRESS_S={bad!r}: expected the seconds between progress lines, a number >= 0"], r.output
    assert list(tmp_path.iterdir()) == []


def test_the_exported_selector_reads_numbers_as_select_does(tmp_path, policy):
    out = tmp_path / "sel.py"
    assert run_cli(["export", policy, "--out", out]).exit_code == 0
    for args, code in ((["16", "4", "4096"], 0), (["1_6", "4", "4096"], 2), (["\u0661\u0666", "4", "4096"], 2),
                       (["\uff11\uff16", "4", "4096"], 2)):
        r = subprocess.run([sys.executable, str(out), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        if code:
            assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_kernels_leaves_out_the_test_only_kernels_unless_asked_and_then_shows_them_apart():
    from kbench.kernels.registry import all_kernels

    test_only = sorted(k.name for k in all_kernels() if k.test_only)
    assert "test-oob-write" in test_only
    r = run_cli(["kernels"], env={"COLUMNS": "250"})
    assert r.exit_code == 0 and "trtllm-decode" in r.output, r.output
    assert not any(n in r.output for n in test_only), r.output
    data = json.loads(run_cli(["kernels", "--json"]).output)
    assert not {k["kernel"] for k in data["kernels"]} & set(test_only) and "test_only_kernels" not in data
    r = run_cli(["kernels", "--test-only"], env={"COLUMNS": "250"})
    main, apart = r.output.split("test only (never in 'all'")
    assert "test-oob-write" not in main and "test-oob-write" in apart, r.output
    data = json.loads(run_cli(["kernels", "--test-only", "--json"]).output)
    assert [k["kernel"] for k in data["test_only_kernels"]] == test_only
    assert all(k["test_only"] for k in data["test_only_kernels"])
