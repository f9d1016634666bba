"""Realistic batches through the engine on CPU: scenario axes, CLI flags, rows, bad input."""
import pytest
from click.testing import CliRunner

from kbench.cases import axes
from kbench.cli.main import cli
from kbench.errors import BadInput
from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario, Timing, load_scenario
from kbench.runs.store import load_run
from kbench.engine.sweep import run_sweep

FAST = Timing(spread_target=0.5, budget_s=0.02, min_samples=3, max_samples=5, warmup_ms=0, min_time_s=0)


def test_sweep_rows_carry_the_axes_and_the_drawn_lengths(tmp_path):
    sc = Scenario(name="real", heads=MODELS["gqa8-d64"], batch_size=[3], q_len=[4], kv_len=[96], page_size=[16],
                  kv_dist=["lognormal:1", "fixed"], q_dist=["accept:0.5"], window_left=[-1, 8], sinks=["on"],
                  kernels=["reference", "fa2-prefill", "trtllm-decode-ragged"], timing=FAST).validate()
    res = run_sweep(sc, out_dir=tmp_path)
    rows = load_run(res.run_dir).rows
    ref = rows[rows.kernel == "reference"]
    assert len(ref) == 4 and (ref.status == "ok").all() and (ref.rel_err == 0).all()
    assert set(ref.case_id) == {
        "bs3-q4-kv96-h16.2.64-p16-HND-bf16-qaccept0.5-sinks",
        "bs3-q4-kv96-h16.2.64-p16-HND-bf16-qaccept0.5-w8-sinks",
        "bs3-q4-kv96-h16.2.64-p16-HND-bf16-kvlognormal1.0-qaccept0.5-sinks",
        "bs3-q4-kv96-h16.2.64-p16-HND-bf16-kvlognormal1.0-qaccept0.5-w8-sinks"}
    ln = ref[ref.kv_dist == "lognormal:1.0"]
    assert (ln.kv_mean == 96).all() and (ln.kv_max > 96).all() and (ln.kv_min < 96).all()
    assert ln.kv_hash.nunique() == 1 and (ln.kv_hash != ref[ref.kv_dist == "fixed"].kv_hash.iloc[0]).all()
    assert (ref.q_max <= 4).all() and (ref.q_min >= 1).all()
    w = ref[ref.window_left == 8].set_index("kv_dist").kv_bytes
    full = ref[ref.window_left == -1].set_index("kv_dist").kv_bytes
    assert (w < full).all()  # roofline bytes: what the window can see
    skipped = rows[rows.status == "skipped"]
    assert set(skipped.kernel) == {"fa2-prefill", "trtllm-decode-ragged"}  # no GPU here


def test_builtin_gpt_oss_scenario():
    sc = load_scenario("gpt-oss")
    assert (sc.heads.num_qo_heads, sc.heads.num_kv_heads, sc.heads.head_dim) == (64, 8, 64)
    cases = sc.cases()
    assert {c.window_left for c in cases} == {-1, 128} and {c.sinks for c in cases} == {"on", "off"}
    assert MODELS["gpt-oss"] == sc.heads


def test_realistic_axes_are_gate_and_group_keys():
    for name in ("kv_dist", "q_dist", "window_left", "sinks", "max_seq_len"):
        assert name in axes.gate_key() and name in axes.GROUP_COLUMNS and name in axes.GRID_AXES


@pytest.mark.parametrize("flag,value,words", [
    ("--kv-dist", "gauss:1", "--kv-dist: unknown distribution 'gauss'"),
    ("--kv-dist", "lognormal:x", "--kv-dist: SIGMA must be a number"),
    ("--q-dist", "accept:2", "--q-dist: accept RATE must be in [0, 1]"),
    ("--window-left", "-2", "window_left: values must be >= -1"),
    ("--sinks", "maybe", "--sinks: 'maybe' is not one of off, on"),
    ("--max-seq-len", "loose", "--max-seq-len: expected 'tight' or 'context:N'"),
    ("--kv-dist", "file:/no/such/file.csv", "kv_dist: cannot read /no/such/file.csv"),
])
def test_bad_realistic_flags_exit_2_with_one_line(tmp_path, flag, value, words):
    r = CliRunner().invoke(cli, ["sweep", "-b", "2", "-q", "2", "-k", "64", f"{flag}={value}", "--out", str(tmp_path)])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_length_file_with_a_request_shorter_than_its_query_is_refused(tmp_path):
    f = tmp_path / "kv.json"
    f.write_text("[100, 3]")
    r = CliRunner().invoke(cli, ["sweep", "-b", "2", "-q", "4", "-k", "64", f"--kv-dist=file:{f}",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "q_dist: request 1 has 4 query tokens but a KV length of 3" in r.output


def test_scenario_file_takes_the_axes(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('model = "gpt-oss"\n[grid]\nbatch_size = 2\nq_len = 4\nkv_len = 512\nq_dist = "accept:0.7"\n'
                 'kv_dist = ["fixed", "zipf"]\nwindow_left = 128\nsinks = "on"\nmax_seq_len = "context:131072"\n')
    cases = load_scenario(str(f)).cases()
    assert {c.kv_dist for c in cases} == {"fixed", "zipf:1.0"}
    assert all(c.case_id.endswith("-qaccept0.7-w128-sinks-msl131072") for c in cases)
    f.write_text('model = "gpt-oss"\n[grid]\nbatch_size = 2\nq_len = 4\nkv_len = 512\nq_dist = "poisson:2"\n')
    with pytest.raises(BadInput, match="grid.q_dist: unknown distribution 'poisson'"):
        load_scenario(str(f))
