"""`kbench report` / `kbench select` end to end: files (the "wrote" line counts them), screen, escaping, the
summary on ties, bad inputs (exit 2, one line), a CPU run's report refused with why and where to look."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from helpers import BASELINE, flashinfer_kernels, one_error_line, run_cli
from report_synth import DECODE, FA2, case, cli, demo_rows, flip_back_rows, row, write_run

PNG = b"\x89PNG\r\n\x1a\n"


def assert_bad_input(res, match: str):
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert re.search(match, lines[0]), lines[0]
    assert "Traceback" not in res.output


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("demo") / "demo-run", demo_rows())
    res = cli("report", run, "--holdout", "0.2", "--plot-batch", 4, "--plot-kv", 32768)
    assert res.exit_code == 0, res.output
    return run, res


def test_report_writes_every_output_into_the_run_folder(demo_report):
    run, res = demo_report
    out = run / "report"
    for name in ("report.md", "report.html", "policy.json", "policy-holdout.json", "cases.csv",
                 "crossovers.csv", "regret.csv", "roofline.png"):
        assert (out / name).is_file(), name
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert sum(n.startswith("speedup-heatmap-") for n in pngs) == 2  # one per head config
    assert sum(n.startswith("time-vs-q-bs4-kv32768-") for n in pngs) == 2 and len(pngs) == 5
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    policy = json.loads((out / "policy.json").read_text())
    assert policy["schema"] == "kbench.policy/2" and policy["device"] == {"name": "NVIDIA H200", "sm": 90}
    assert policy["built_from"][0]["run"] == "demo-run" and policy["built_from"][0]["cases"] == 512
    assert "decode-wrapper" not in {c["kernel"] for g in policy["groups"] for c in g["cells"]
                                    if c["batch_size"] <= 4}  # wrong there, so never chosen there


def test_report_screen_shows_winners_crossovers_and_regret(demo_report):
    _, res = demo_report
    out = res.output
    assert "Per case (512 cases; ties marked)" in out and "decode-wrapper (wrong)" in out
    # GQA 8 at bs 64, kv 32768: decode wins q 1-4 and 9-12, context 5-8 and 13-16 (the demo's model)
    assert re.search(r"8/1/128 bf16 p64 HND\s*│\s*64\s*│\s*32768\s*│\s*1-4, 9-12\s*│\s*5-8, 13-16", out)
    assert re.search(r"all cases \(in-sample\)\s*│\s*512\s*│\s*0\.00%\s*│\s*0\.00%", out)
    assert "holdout 20% (seed 0, 102 cases)" in out


def test_html_is_self_contained_and_escapes_result_strings(tmp_path):
    evil = "<script>alert('x')</script>"
    c = case(1, 1, 1024)
    run = write_run(tmp_path / "run", [row(DECODE, c, 10.0), row(FA2, c, 12.0),
                                       row("decode-wrapper", c, 1.0, status="wrong", reason=f"bad {evil} | x"),
                                       row("fa3-prefill", c, 1.0, status="failed", reason=evil)])
    assert cli("report", run).exit_code == 0
    html = (run / "report" / "report.html").read_text()
    assert "<script" not in html.lower() and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert re.findall(r'src="([^"]{0,22})', html) and all(s.startswith("data:image/png;base64,")
                                                          for s in re.findall(r'src="([^"]{0,22})', html))
    assert "href=" not in html and "<link" not in html
    md = (run / "report" / "report.md").read_text()
    assert "<script" not in md and "&lt;script&gt;" in md and "bad &lt;script&gt;alert('x')&lt;/script&gt; \\| x" in md
    # a kernel name that is markup is no kernel name: refused where the run is loaded (#48), so no policy holds it
    bad = write_run(tmp_path / "bad", [row(DECODE, c, 10.0), row("fa3-prefill", c, 11.0, path="context")])
    (bad / "rows.jsonl").write_text((bad / "rows.jsonl").read_text().replace('"fa3-prefill"', json.dumps(evil)))
    r = cli("report", bad)
    assert r.exit_code == 2 and re.search(r"rows\.jsonl: row \d: kernel is \"<script>alert\('x'\)</script>\", not a "
                                          r"kernel name", r.output) and not (bad / "report").exists()


def test_report_out_option_and_flip_back_on_screen(tmp_path):
    run = write_run(tmp_path / "run", flip_back_rows(bss=(1,), kvs=(1024,)))
    res = cli("report", run, "--out", tmp_path / "elsewhere")
    assert res.exit_code == 0 and (tmp_path / "elsewhere" / "report.html").is_file()
    assert not (run / "report").exists()
    assert re.search(r"│\s*1-3, 9-16\s*│\s*4-8\s*│\s*-\s*│\s*-\s*│\s*2\s*│", res.output)


@pytest.fixture
def policy_file(tmp_path):
    rows = []
    for kv in (1024, 4096):
        for q in (1, 4, 8):
            rows += [row(DECODE, case(1, q, kv), 10.0), row(FA2, case(1, q, kv), 20.0),
                     row(DECODE, case(8, q, kv), 40.0), row(FA2, case(8, q, kv), 20.0)]
    run = write_run(tmp_path / "run", rows)
    assert cli("report", run).exit_code == 0
    return run / "report" / "policy.json"


def test_select_between_grid_points(policy_file):
    res = cli("select", "--policy", policy_file, "--batch-size", 2, "--q-len", 3, "--kv-len", 2000)
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"{DECODE} (decode path) for bs 2 q 3 kv 2000")
    assert ("interpolated: not measured at bs 2 q 3 kv 2000: the answer, speedup included, is the one measured at "
            "bs 1 q 4 kv 1024, its nearest measured neighbour") in res.output
    assert "not measured: the policy's grid has this shape" not in res.output  # bs 2 is no grid value
    assert "they disagree" in res.output
    res = cli("select", "--policy", policy_file, "--batch-size", 3, "--q-len", 3, "--kv-len", 2000, "--json")
    ans = json.loads(res.output)
    assert ans["kernel"] == FA2 and ans["interpolated"] is True and ans["used"]["batch_size"] == 8
    assert len(ans["neighbours"]) == 8
    res = cli("select", "--policy", policy_file, "--batch-size", 8, "--q-len", 4, "--kv-len", 4096)
    assert "measured: this exact shape" in res.output and "0.50x" in res.output


def test_select_says_a_grid_point_without_a_result_was_not_measured(policy_file, tmp_path):
    """A policy with holes is legitimate (an adaptive run measures part of its grid; a case where no kernel passed
    has no cell): select answers a hole from the nearest measured cell and says that the shape was not measured."""
    pol = json.loads(policy_file.read_text())
    cells = pol["groups"][0]["cells"]
    pol["groups"][0]["cells"] = [c for c in cells if (c["batch_size"], c["q_len"], c["kv_len"]) != (8, 4, 4096)]
    (tmp_path / "holey.json").write_text(json.dumps(pol))  # copied out of the report folder: edited by hand
    args = ["select", "--policy", tmp_path / "holey.json", "--batch-size", 8, "--q-len", 4, "--kv-len", 4096]
    res = cli(*args)
    assert res.exit_code == 0, res.output
    assert ("interpolated: not measured at bs 8 q 4 kv 4096: the answer, speedup included, is the one measured at "
            "bs 8 q 1 kv 4096, its nearest measured neighbour") in res.output
    assert "not measured: the policy's grid has this shape but no result for it" in res.output
    assert "measured: this exact shape" not in res.output
    ans = json.loads(cli(*args, "--json").output)
    assert ans["interpolated"] is True and ans["grid_point"] is True and ans["method"] == "nearest"
    pol["groups"][0]["cells"] = [c for c in cells if (c["batch_size"], c["kv_len"]) != (8, 4096)]  # a whole line
    (tmp_path / "holey.json").write_text(json.dumps(pol))
    res = cli(*args)
    assert res.exit_code == 0, res.output
    assert ("is the one measured at bs 8 q 4 kv 1024, the nearest measured case overall (none on the nearest "
            "batch/KV line)") in res.output
    assert "not measured: the policy's grid has this shape" in res.output


def test_select_outside_range_exits_2_unless_extrapolate(policy_file):
    args = ["select", "--policy", policy_file, "--batch-size", 64, "--q-len", 4, "--kv-len", 4096]
    assert_bad_input(cli(*args), r"outside the measured range \(batch_size 64 not in 1\.\.8\); pass --extrapolate")
    res = cli(*args, "--extrapolate")
    assert res.exit_code == 0 and res.output.startswith(FA2)
    assert "EXTRAPOLATED: outside the measured range, clamped (batch_size 64 -> 8)" in res.output


def test_bad_policy_files_exit_2(policy_file, tmp_path):
    args = ["--batch-size", 1, "--q-len", 1, "--kv-len", 1024]
    text = policy_file.read_text()
    wrong = json.loads(text)
    wrong["schema"] = "someone.else/3"
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    assert_bad_input(cli("select", "--policy", tmp_path / "wrong.json", *args), "schema 'someone.else/3'")
    (tmp_path / "trunc.json").write_text(text[:200])
    assert_bad_input(cli("select", "--policy", tmp_path / "trunc.json", *args), "not valid JSON")
    assert_bad_input(cli("select", "--policy", tmp_path / "none.json", *args), "no such policy file")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert_bad_input(cli("select", "--policy", tmp_path / "list.json", *args), "expected a JSON object")


def test_bad_runs_exit_2(tmp_path):
    good = write_run(tmp_path / "good", flip_back_rows(bss=(1,), kvs=(1024,)))
    nomanifest = tmp_path / "nomanifest"
    nomanifest.mkdir()
    (nomanifest / "rows.csv").write_text("case_id\n")
    assert_bad_input(cli("report", nomanifest), "not a kbench run")
    assert_bad_input(cli("report", tmp_path / "missing"), "no such run folder")
    trunc = write_run(tmp_path / "trunc", flip_back_rows(bss=(1,), kvs=(1024,)))
    (trunc / "rows.jsonl").unlink()
    (trunc / "rows.csv").unlink()
    data = (trunc / "rows.parquet").read_bytes()
    (trunc / "rows.parquet").write_bytes(data[: len(data) // 2])
    assert_bad_input(cli("report", trunc), "unreadable Parquet")
    failed = write_run(tmp_path / "failed", [row(DECODE, case(1, 1, 1024), None, status="failed")])
    assert_bad_input(cli("report", failed), "no row with status ok")
    assert_bad_input(cli("report", good, "--holdout", "1.5"), "--holdout 1.5")
    assert_bad_input(cli("report", good, "--plot-batch", 1), "same number of times")
    assert_bad_input(cli("report", good, "--plot-batch", 3, "--plot-kv", 1024), "--plot-batch 3 --plot-kv 1024: not measured")


def test_real_process_prints_one_line_and_exits_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "report", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope'}: no such run folder"]


def test_report_of_a_cpu_run_says_why_and_points_to_the_baseline(tmp_path, cpu_run):
    line = one_error_line(run_cli(["report", cpu_run, "--out", tmp_path / "rep"]))
    assert "this run is from a CPU" in line and f"{2 * flashinfer_kernels()} skipped" in line
    assert "2 ok row(s) are the float32 reference" in line and "kbench report results/baselines/h200" in line
    assert not (tmp_path / "rep").exists()


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


def test_a_table_longer_than_the_cap_shows_its_first_rows_and_says_where_the_rest_are(tmp_path, monkeypatch):
    """A 100,000-row sweep made a 13 MB report.md; each table stops at TABLE_ROWS_MAX rows, says how many more
    there are and which file beside the report holds them, in report.md and report.html alike."""
    from kbench.report import document

    monkeypatch.setattr(document, "TABLE_ROWS_MAX", 20)
    run = write_run(tmp_path / "run", flip_back_rows())  # 64 cases
    assert cli("report", run).exit_code == 0
    out = run / "report"
    md = (out / "report.md").read_text()
    per_case = md[md.index("## Per case"):]
    assert per_case.count("\n| ") == 1 + 20  # the header and 20 rows
    assert "... and 44 more rows, not shown (20 of 64 here; every row behind this table is in cases.csv" in per_case
    assert len((out / "cases.csv").read_text().splitlines()) == 1 + 64  # nothing is lost from the files
    html = (out / "report.html").read_text()
    assert "... and 44 more rows, not shown (20 of 64 here" in html
    assert html.count("<table>") == md.count("\n|---|") and html.count("more rows, not shown") == md.count(
        "more rows, not shown")
    monkeypatch.setattr(document, "TABLE_ROWS_MAX", 1000)
    assert cli("report", run, "--out", tmp_path / "full").exit_code == 0
    assert "more rows, not shown" not in (tmp_path / "full" / "report.md").read_text()


@pytest.mark.parametrize("value", [-5.0, 0.0, float("nan"), float("inf")])
def test_an_ok_row_without_a_measured_time_is_refused_by_report_recommend_export_and_baseline(tmp_path, value):
    # ranked, -5 us won every case (recommend printed negative attention time) and 0 divided the speedups
    import shutil

    import pandas as pd

    from report_synth import cli as run_cli

    run = tmp_path / "run"
    shutil.copytree("results/baselines/h200-draft-extend-kv4096", run)
    rows = pd.read_parquet(run / "rows.parquet")
    i = rows.index[(rows.status == "ok") & (rows.path != "reference")][0]
    rows.loc[i, "median_us"] = value
    rows.to_parquet(run / "rows.parquet")
    for f in ("rows.csv", "rows.jsonl"):
        (run / f).unlink(missing_ok=True)
    for args in (["report", run, "--out", tmp_path / "rep"], ["export", run, "--out", tmp_path / "sel.py"],
                 ["recommend", run, "--engine", "sglang", "--batch-size", 16, "--q-len", 1, "--kv-len", 4096],
                 ["baseline", run, "--name", "b", "--out", tmp_path / "bl", "--force"]):  # a baseline to commit
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.output)
        line = r.output.strip().splitlines()
        assert len(line) == 1 and line[0].startswith(f"error: {run}: row {rows.loc[i, 'kernel']} / ") \
            and f"median_us {value:g}" in line[0], r.output
    assert not (tmp_path / "rep").exists() and not (tmp_path / "sel.py").exists()
    assert not (tmp_path / "bl" / "b").exists()
