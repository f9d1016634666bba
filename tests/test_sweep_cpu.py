"""The sweep end to end on a machine without CUDA: the reference is timed by wall clock, every other kernel
is a skipped row with its reason; results round-trip; a case too big for host memory is skipped before it is
allocated; a long CPU sweep says so at the start; without a terminal, tables keep words and progress is logged.
(Interruption and --resume: tests/test_resume.py.)"""
import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from kbench.cli.main import cli
from kbench.runs.rows import COLUMNS
from kbench.cases.scenario import load_scenario
from kbench.runs.store import RunWriter, load_run
from kbench.engine.sweep import run_sweep
from kbench.kernels.registry import select
from helpers import TINY, flashinfer_kernels, tiny

ALL = len(select(["all"]))  # every kernel of 'all' (GQA, MLA and the reference) gets a row per case


def test_cpu_sweep_writes_a_complete_run(tmp_path):
    res = run_sweep(tiny(), out_dir=tmp_path)
    run = load_run(res.run_dir)
    rows = run.rows
    assert run.manifest["status"] == "complete"
    assert run.manifest["device"]["cuda"] is False
    assert set(run.manifest["wall_s"]) >= {"compile_s", "inputs_s", "reference_s", "check_s", "timing_s", "total_s"}
    assert len(rows) == 4 * ALL == 4 * 16  # 4 cases x 16 kernels (the MLA ones skip GQA cases): nothing silently absent
    ref = rows[rows.kernel == "reference"]
    assert (ref.status == "ok").all() and (ref.timer == "wall-clock").all()
    assert (ref.median_us > 0).all() and (ref.num_samples >= 3).all()
    assert (ref.p25_us <= ref.median_us).all() and (ref.median_us <= ref.p75_us).all()
    others = rows[rows.kernel != "reference"]
    assert (others.status == "skipped").all()
    gqa = others.reason.str.startswith("a GQA case: ")  # the MLA kernels on these GQA cases
    assert set(others[gqa].kernel) == {"flashmla", "trtllm-gen-mla", "flashinfer-mla-fa3", "flashinfer-mla-fa2",
                                       "vllm-fa3-mla", "vllm-fa3-mla-sgl-call"}
    assert others[~gqa].reason.str.contains("CUDA").all()
    for f in ("manifest.json", "rows.jsonl", "rows.parquet", "rows.csv"):
        assert (res.run_dir / f).is_file()
    pq = pd.read_parquet(res.run_dir / "rows.parquet")
    assert list(pq.columns) == COLUMNS and len(pq) == len(rows)
    csv = pd.read_csv(res.run_dir / "rows.csv")
    assert len(csv) == len(rows)
    assert json.loads(csv.loc[csv.kernel == "reference", "samples_us"].iloc[0])


def test_store_round_trip_parquet_csv_and_journal(tmp_path):
    res = run_sweep(tiny(batch_size=[1], q_len=[2]), out_dir=tmp_path)
    from_journal = load_run(res.run_dir).rows
    (res.run_dir / "rows.jsonl").unlink()
    from_parquet = load_run(res.run_dir).rows
    (res.run_dir / "rows.parquet").unlink()
    from_csv = load_run(res.run_dir).rows
    for df in (from_parquet, from_csv):
        assert list(df.kernel) == list(from_journal.kernel)
        assert list(df.status) == list(from_journal.status)
        ok = df.status == "ok"
        assert df.loc[ok, "median_us"].astype(float).tolist() == pytest.approx(
            from_journal.loc[ok, "median_us"].astype(float).tolist())
        assert [list(x) for x in df.loc[ok, "samples_us"]] == [list(x) for x in from_journal.loc[ok, "samples_us"]]


def test_cli_default_sweep_runs_on_cpu(tmp_path):
    res = CliRunner().invoke(cli, ["sweep", "--batch-size", "1", "--kv-len", "128", "--q-len", "1,2",
                                   "--budget", "0.05", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "reference" in res.output and "needs a CUDA GPU" in res.output
    runs = list(tmp_path.iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("quick-")
    rows = load_run(runs[0]).rows
    assert set(rows.case_id) == {"bs1-q1-kv128-h32.8.128-p16-HND-bf16", "bs1-q2-kv128-h32.8.128-p16-HND-bf16"}


def test_run_writer_refuses_to_overwrite_a_run(tmp_path):
    res = run_sweep(tiny(batch_size=[1], q_len=[1]), out_dir=tmp_path)
    before = (res.run_dir / "rows.jsonl").read_text()
    from kbench.errors import BadInput

    with pytest.raises(BadInput):
        RunWriter(res.run_dir, {"kind": "sweep"})
    assert (res.run_dir / "rows.jsonl").read_text() == before


def test_kernels_and_env_commands():
    r = CliRunner().invoke(cli, ["kernels", "--json"])
    assert r.exit_code == 0
    data = json.loads(r.output)
    names = [k["kernel"] for k in data["kernels"]]
    for k in ("trtllm-decode", "trtllm-context", "trtllm-fmha-v2", "fa2-prefill", "fa3-prefill", "decode-wrapper", "reference"):
        assert k in names
    by = {k["kernel"]: k for k in data["kernels"]}
    assert by["reference"]["available"] and not by["fa2-prefill"]["available"]
    assert by["fa2-prefill"]["reason"]
    r = CliRunner().invoke(cli, ["env", "--json"])
    assert r.exit_code == 0 and "torch_version" in json.loads(r.output)


def test_default_quick_scenario_is_cpu_sized():
    sc = load_scenario("quick")
    assert len(sc.cases()) <= 32


@pytest.fixture
def broken_kernel():
    """A kernel that computes the wrong thing (10% off), registered for one test."""
    from kbench.kernels import registry
    from kbench.kernels.reference import ReferenceKernel, reference_attention

    class Broken(ReferenceKernel):
        name = "broken-decode"
        path = "decode"

        def prepare(self, inputs):
            return lambda i: reference_attention(inputs, i) * 1.1

    registry._load()
    registry.register(Broken())
    yield "broken-decode"
    registry._REGISTRY.pop("broken-decode", None)


def test_wrong_kernel_is_flagged_and_exits_1(tmp_path, broken_kernel):
    args = ["sweep", "--batch-size", "1", "--q-len", "2", "--kv-len", "64", "--budget", "0.02",
            "--kernels", f"reference,{broken_kernel}", "--out", str(tmp_path / "a")]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 1, r.output
    assert "WRONG" in r.output and "rel err" in r.output
    run = load_run(next((tmp_path / "a").iterdir()))
    row = run.rows[run.rows.kernel == broken_kernel].iloc[0]
    assert row.status == "wrong" and row.rel_err > 0.05
    assert row.median_us is None or pd.isna(row.median_us)  # a wrong kernel is not timed
    r = CliRunner().invoke(cli, args[:-1] + [str(tmp_path / "b"), "--allow-wrong"])
    assert r.exit_code == 0, r.output


def test_a_case_that_cannot_fit_is_skipped_before_allocation(monkeypatch):
    import torch

    from kbench.cases.case import Case
    from kbench.device import DeviceInfo
    from kbench.engine.placement import fits

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (8 << 30, 141 << 30))
    dev = DeviceInfo(cuda=True, name="fake", sm=90, l2_bytes=60 << 20, total_memory=141 << 30)
    big = Case(256, 16, 32768, 32, 8, 128)  # 34 GB of KV
    reason = fits(big, 1, dev)
    assert reason and "GiB of device memory" in reason and "8.0 GiB free" in reason
    assert fits(Case(1, 4, 512, 32, 8, 128), 1, dev) is None


def test_out_of_memory_building_inputs_is_a_failed_row_not_a_crash(tmp_path, monkeypatch):
    import kbench.engine.measure as measure_mod

    def boom(*a, **k):
        raise RuntimeError("CPU: not enough memory: you tried to allocate 2147483648 bytes")

    monkeypatch.setattr(measure_mod, "build_inputs", boom)
    res = run_sweep(tiny(batch_size=[1], q_len=[1, 2]), out_dir=tmp_path)
    ref = res.rows[res.rows.kernel == "reference"]
    assert res.status == "complete" and len(ref) == 2
    assert (ref.status == "failed").all() and ref.reason.str.contains("not enough memory").all()


def test_cpu_case_too_big_for_host_memory_is_skipped_before_allocating(tmp_path, monkeypatch):
    from kbench.timing import hardware
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.sweep import run_sweep

    monkeypatch.setattr(hardware, "host_available_bytes", lambda: 3 << 30)
    sc = apply_overrides(load_scenario("quick"), batch_size="1,256", q_len="16", kv_len="32768",
                         kernels="reference", budget_s=0.02)
    res = run_sweep(sc, tmp_path)
    big = res.rows[res.rows["batch_size"] == 256].iloc[0]
    assert big.status == "skipped" and "GiB of host memory, 3.0 GiB available" in big.reason
    assert res.rows[res.rows["batch_size"] == 1].iloc[0].status == "ok"


def test_long_cpu_sweep_says_so_at_the_start(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CPU warning")
    p = subprocess.Popen([sys.executable, "-m", "kbench.cli.main", "sweep", "-s", "draft-extend", "--out",
                          str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "COLUMNS": "300"})
    try:
        head = [p.stdout.readline() for _ in range(2)]
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=120)
    text = " ".join(" ".join(head).split())
    assert "1008 cases" in text and "take about" in text and "not a bound" in text and "narrow the grid" in text


def test_without_a_terminal_tables_keep_words_and_progress_is_logged(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["KBENCH_PROGRESS_S"] = "0"
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", *TINY, "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "trtllm-decode" in r.stdout and "trtllm-context" in r.stdout  # one word, not trtl/lm-d/ecod/e
    n = 2 * (flashinfer_kernels() + 1)  # two cases x (every kernel in "all" + the reference)
    assert "  measuring: 1/" + str(n) + " after" in r.stdout and f"  measuring: {n}/{n} after" in r.stdout


def test_the_eta_is_the_phase_s_average_pace_not_the_last_burst(monkeypatch):
    """A slow first case then a burst of instant rows (kernels that cannot run here): rich's windowed speed
    read the burst as the pace ('eta 12 s' with 80 s to go); the ETA is rows left x seconds per row so far."""
    import io

    from rich.console import Console

    from kbench.cli.render import RichSweepObserver

    monkeypatch.setenv("KBENCH_PROGRESS_S", "0")
    buf = io.StringIO()
    obs = RichSweepObserver(Console(file=buf, force_terminal=False, width=200))
    clock = [100.0]
    obs.progress.get_time = lambda: clock[0]
    with obs:
        obs.phase("measuring", total=96)
        clock[0] = 120.0  # the first row after 20 s
        obs.advance()
        for _ in range(34):  # then 34 rows in 11 s
            clock[0] += 11 / 34
            obs.advance()
        task = obs.progress.tasks[-1]
        assert task.time_remaining is not None and task.time_remaining < 25  # rich's own: the burst's pace
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("  measuring: 35/96")]
    assert lines and lines[-1].startswith("  measuring: 35/96 after 31 s, eta 54 s"), lines[-1:]  # 61 x 31 / 35


def test_cpu_sweep_says_its_times_are_the_reference_s_and_prints_the_next_step(tmp_path):
    """On a CPU every kernel is skipped: the table says its times are the float32 reference's by wall clock (with
    its bandwidth readable, not 0), and the summary says what that run is and what to run next, on a committed
    baseline; those commands run as printed."""
    r = CliRunner().invoke(cli, ["sweep", *TINY, "--out", str(tmp_path / "r")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    out = r.output
    assert "(the float32 reference on this CPU, by wall clock: us per call; under it its KV GB/s)" in " ".join(out.split())
    ref_cells = [ln for ln in out.splitlines() if ln.startswith("│    │   │")]
    assert ref_cells and all(" 0 " not in ln for ln in ref_cells), ref_cells
    tail = out[out.index("no kernel ran here"):].splitlines()
    assert "the times above are the float32 reference's on this CPU" in tail[0]
    assert tail[1] == "next, on a committed H200 baseline:"
    cmds = [ln.strip().split()[1:] for ln in tail[2:5]]
    assert [c[0] for c in cmds] == ["report", "select", "gate"]
    os.chdir(tmp_path)  # the commands name paths from the repository root and h200-report/ beside it
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        fix = lambda c: [a.replace("results/baselines/", f"{root}/results/baselines/") for a in c]  # noqa: E731
        for c in cmds:
            res = CliRunner().invoke(cli, fix(c))
            assert res.exit_code == 0, (c, res.output)
        assert "PASS" in res.output
    finally:
        os.chdir(root)


def test_a_gpu_run_whose_kernels_all_failed_gets_no_cpu_hint():
    from kbench.cli.render import cpu_next_steps

    rows = pd.DataFrame({"status": ["ok", "failed"], "path": ["reference", "decode"], "sm": [90, 90]})
    assert cpu_next_steps(rows) is None
    assert cpu_next_steps(rows.assign(sm=0)).startswith("no kernel ran here")
    assert cpu_next_steps(rows.assign(status="ok", sm=0)) is None
