"""Scenario files and CLI axes: grid expansion, built-ins, overrides, and every bad input (exit 2, one line)."""
import subprocess
import sys

import pytest
from click.testing import CliRunner
from helpers import one_error_line, run_cli

from kbench.cases.axes import parse_int_axis
from kbench.cli.main import cli
from kbench.errors import BadInput
from kbench.cases.scenario import apply_overrides, builtin_names, load_scenario, scenario_from_dict


def test_axis_forms():
    assert parse_int_axis("1..4", "f", "w") == [1, 2, 3, 4]
    assert parse_int_axis("1..10:3", "f", "w") == [1, 4, 7, 10]
    assert parse_int_axis("512..32768*2", "f", "w") == [512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert parse_int_axis("16,1,4,4", "f", "w") == [1, 4, 16]
    assert parse_int_axis([1, "3..5"], "f", "w") == [1, 3, 4, 5]
    assert parse_int_axis({"start": 2, "stop": 16, "factor": 2}, "f", "w") == [2, 4, 8, 16]
    assert parse_int_axis(7, "f", "w") == [7]


def test_grid_expansion_is_the_full_product():
    sc = scenario_from_dict({"model": "llama3-8b", "grid": {
        "batch_size": [1, 2], "q_len": "1..3", "kv_len": [64, 128], "kv_layout": ["HND", "NHD"],
        "page_size": [16, 32]}}, "t.toml")
    cases = sc.cases()
    assert len(cases) == 2 * 3 * 2 * 2 * 2
    assert len({c.case_id for c in cases}) == len(cases)
    c = cases[0]
    assert (c.num_qo_heads, c.num_kv_heads, c.head_dim) == (32, 8, 128)
    assert {(c.batch_size, c.q_len) for c in cases} == {(b, q) for b in (1, 2) for q in (1, 2, 3)}


def test_builtins_load_and_required_ones_exist():
    names = builtin_names()
    for required in ("quick", "draft-extend", "llama3-70b-tp8", "gqa8-d64"):
        assert required in names
    de = load_scenario("draft-extend")
    assert de.batch_size == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert de.q_len == list(range(1, 17))
    assert de.kv_len[0] == 512 and de.kv_len[-1] == 32768
    assert (de.heads.num_qo_heads, de.heads.num_kv_heads, de.heads.head_dim) == (32, 8, 128)
    g = load_scenario("gqa8-d64")
    assert g.heads.group == 8 and g.heads.head_dim == 64
    t = load_scenario("llama3-70b-tp8")
    assert (t.heads.num_qo_heads, t.heads.num_kv_heads) == (8, 1)
    for n in names:
        assert load_scenario(n).cases()


def test_overrides_replace_axes():
    sc = apply_overrides(load_scenario("draft-extend"), batch_size="16,64", kv_len="4096", q_len="1..16",
                         heads="8/1/128", dtype="fp16")
    assert sc.batch_size == [16, 64] and sc.kv_len == [4096] and sc.q_len == list(range(1, 17))
    assert sc.heads.num_kv_heads == 1 and sc.dtype == ["fp16"]
    assert len(sc.cases()) == 32


BAD_FILES = {
    "q_len > kv_len": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 16\nkv_len = 8\n', "grid.q_len"),
    "page size": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\npage_size = 24\n', "grid.page_size"),
    "head_dim": ('[heads]\nnum_qo_heads = 8\nnum_kv_heads = 2\nhead_dim = 96\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n', "heads.head_dim"),
    "unknown model": ('model = "gpt-5"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n', "model"),
    "unknown key": ('model = "llama3-8b"\nbogus = 1\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n', "bogus"),
    "unknown grid key": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\nseq = 3\n', "seq"),
    "non-number": ('model = "llama3-8b"\n[grid]\nbatch_size = "lots"\nq_len = 2\nkv_len = 64\n', "grid.batch_size"),
    "bool": ('model = "llama3-8b"\n[grid]\nbatch_size = true\nq_len = 2\nkv_len = 64\n', "grid.batch_size"),
    "bad dtype": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\ndtype = "fp32"\n', "grid.dtype"),
    "not toml": ('model = "llama3-8b\n', "not valid TOML"),
    "gqa": ('[heads]\nnum_qo_heads = 6\nnum_kv_heads = 4\nhead_dim = 128\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n', "num_qo_heads"),
    "missing axis": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\n', "grid.kv_len"),
    "unknown kernel": ('model = "llama3-8b"\nkernels = ["flashmla-v9"]\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n', "kernels"),
    "zero": ('model = "llama3-8b"\n[grid]\nbatch_size = 0\nq_len = 2\nkv_len = 64\n', "grid.batch_size"),
    "empty range": ('model = "llama3-8b"\n[grid]\nbatch_size = "8..2"\nq_len = 2\nkv_len = 64\n', "grid.batch_size"),
    "duty zero": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n[timing]\nduty = 0\n', "timing.duty"),
    "duty > 1": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n[timing]\nduty = 1.5\n', "timing.duty"),
    "min time nan": ('model = "llama3-8b"\n[grid]\nbatch_size = 1\nq_len = 2\nkv_len = 64\n[timing]\nmin_time_s = nan\n',
                     "timing.min_time_s"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_scenario_file_exits_2_with_one_line_naming_field_and_file(case, tmp_path):
    text, field = BAD_FILES[case]
    f = tmp_path / "bad.toml"
    f.write_text(text)
    res = CliRunner().invoke(cli, ["sweep", "--scenario", str(f), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    assert field in lines[0] and "bad.toml" in lines[0]
    assert not (tmp_path / "r").exists()  # nothing was written


@pytest.mark.parametrize("args,needle", [
    (["--q-len", "32", "--kv-len", "16"], "q_len"),
    (["--batch-size", "x"], "--batch-size"),
    (["--page-size", "48"], "page_size"),
    (["--model", "nope"], "--model"),
    (["--heads", "32/8"], "--heads"),
    (["--kernels", "fa9"], "unknown kernel"),
    (["--scenario", "nope"], "unknown scenario"),
    (["--scenario", "missing.toml"], "does not exist"),
    (["--slow-kernel", "fa2-prefill"], "--slow-kernel"),
    (["--resume", "/nonexistent/run"], "--out cannot change it"),  # options the run fixes: said before the path
    (["--duty", "0"], "timing.duty"),
    (["--min-time", "-1"], "timing.min_time_s"),
    (["-b", "\u0661\u0662"], "--batch-size: expected an integer written with the digits 0-9, got '\u0661\u0662'"),
    (["-k", "\uff16\uff14"], "--kv-len: expected an integer written with the digits 0-9"),  # fullwidth 64
    (["-q", "1..\u0664"], "--q-len: expected an integer"),
    (["--window-left", "\u0968"], "--window-left: expected an integer written with the digits 0-9"),  # Devanagari 2
    (["--kv-dist", "uniform:\u0661..\u0669"], "uniform:LO..HI with integers"),
    (["--max-seq-len", "context:\u0664\u0660\u0669\u0666"], "expected 'tight' or 'context:N'"),
    (["--tree", "topk:\u0664"], "topk:K needs an integer K (digits 0-9)"),
    # numbers beyond what the kernels index: a 20-digit seed or window crashed mid-run (numpy/torch overflow) and
    # left a 'crashed' run folder; a huge qk_nope_head_dim ran and was stored as -9223372036854775808
    (["--seed", "99999999999999999999"], "--seed"),
    (["--seed", "-1"], "--seed"),
    (["--window-left", "99999999999999999999"], "window_left: 99999999999999999999 is beyond the int32 range"),
    (["--batch-size", "3000000000"], "batch_size: 3000000000 is beyond the int32 range"),
    (["--heads", "32/8/99999999999999999999"], "head_dim: 99999999999999999999 is beyond the int32 range"),
    (["--heads", "mla:16/512/64/99999999999999999999"], "qk_nope_head_dim: 99999999999999999999 is beyond"),
])
def test_bad_cli_axes_exit_2(args, needle, tmp_path):
    res = CliRunner().invoke(cli, ["sweep", "--out", str(tmp_path / "o"), *args])
    assert res.exit_code == 2, res.output
    assert needle in res.output and "Traceback" not in res.output
    assert len([l for l in res.output.splitlines() if l.strip()]) == 1
    assert not (tmp_path / "o").exists()  # refused before a run folder exists


def test_bad_input_through_the_real_console_script(tmp_path):
    """The installed entry point, not just CliRunner: exit 2, one line on stderr, no traceback."""
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", "--q-len", "0"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error:")


def test_scenario_errors_are_badinput():
    with pytest.raises(BadInput):
        scenario_from_dict({"model": "llama3-8b", "grid": {"batch_size": 1, "q_len": 2}}, "x")


def test_timing_overrides_reach_the_stop_rule_and_the_manifest(tmp_path):
    sc = apply_overrides(load_scenario("quick"), duty=0.5, min_time_s=0.3, batch_size="1", q_len="1", kv_len="16")
    assert sc.timing.duty == 0.5 and sc.timing.stop_rule().min_time_s == 0.3
    res = CliRunner().invoke(cli, ["sweep", "--batch-size", "1", "--q-len", "1", "--kv-len", "16", "--budget", "0.05",
                                   "--duty", "0.5", "--min-time", "0.02", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    import json

    m = json.loads(next(tmp_path.iterdir()).joinpath("manifest.json").read_text())
    assert m["timer"]["duty"] == 0.5 and m["timer"]["min_time_s"] == 0.02 and "fence" in m["timer"]
    assert m["isolated"] is False  # no GPU here: in-process by default


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
