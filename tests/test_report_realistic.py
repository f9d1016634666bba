"""The report's realistic-batch section: rows paired on one axis, winners and ratios."""
import pandas as pd

from kbench.case import Case
from kbench.report.realistic import acceptance_table, axis_effect_table, realistic_blocks, with_defaults

BASE = Case(16, 4, 4096, 32, 8, 128)


def row(kernel, path, us, **axes):
    c = Case(**{**BASE.to_dict(), **axes})
    return {"kernel": kernel, "path": path, "median_us": us, "status": "ok", "case_id": c.case_id, **c.to_dict()}


def rows():
    return pd.DataFrame([
        row("trtllm-decode", "decode", 60.0), row("fa2-prefill", "context", 62.0),
        row("trtllm-decode", "decode", 100.0, kv_dist="lognormal:1.0"),
        row("fa2-prefill", "context", 61.0, kv_dist="lognormal:1.0"),
        row("trtllm-decode", "decode", 58.0, q_dist="accept:0.7"),
        row("trtllm-decode-ragged", "decode", 57.0, q_dist="accept:0.7"),
        row("fa2-prefill", "context", 50.0, q_dist="accept:0.7"),
        row("trtllm-decode", "decode", 10.0, window_left=128),
        row("fa2-prefill", "context", 17.0, window_left=128),
    ])


def test_acceptance_table_names_the_winner_and_ragged_over_padded():
    ok = with_defaults(rows())
    headers, out = acceptance_table(ok)
    assert len(out) == 1
    line = dict(zip(headers, out[0]))
    assert line["q_dist"] == "accept:0.7" and line["padded decode"] == "trtllm-decode"
    assert line["winner"] == "fa2-prefill by 1.14x" and line["ragged / padded"] == "0.98"


def test_heterogeneous_kv_flips_the_winner():
    ok = with_defaults(rows())
    headers, out = axis_effect_table(ok, "kv_dist")
    by_kernel = {r[3]: dict(zip(headers, r)) for r in out}
    assert by_kernel["trtllm-decode"]["ratio"] == "1.67x" and by_kernel["fa2-prefill"]["ratio"] == "0.98x"
    assert by_kernel["trtllm-decode"]["winner at default"] == "trtllm-decode"
    assert by_kernel["trtllm-decode"]["winner here"] == "fa2-prefill"


def test_sections_present_only_for_realistic_rows():
    blocks = realistic_blocks(rows())
    titles = [b[2] for b in blocks if b[0] == "h"]
    assert titles[0] == "Realistic batches" and "Sliding window vs full attention" in titles
    assert "Attention sinks vs none" not in titles  # no sink rows: no section
    plain = rows()[lambda d: (d.kv_dist == "fixed") & (d.q_dist == "fixed") & (d.window_left == -1)]
    assert realistic_blocks(plain) == []
    old = plain.drop(columns=["kv_dist", "q_dist", "window_left", "sinks", "max_seq_len"])  # an older run
    assert realistic_blocks(old) == []
