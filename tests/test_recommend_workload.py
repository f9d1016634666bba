"""Workloads: weighted lists, lognormal spreads, JSONL files (header, per-request lengths), the schema they follow,
and files that do not parse as one line naming the line."""
from __future__ import annotations

import json
import math
import os
import re

import jsonschema
import pytest

from kbench.errors import BadInput
from kbench.recommend.workload import (SCHEMA_FILE, from_options, lognormal_bins, parse_line, read_workload,
                                       weighted, workload_schema)


def test_weighted_lists_ranges_and_weights():
    assert weighted("batch_size", "1@4,2@3,4", "--batch-size") == [(1, 4.0), (2, 3.0), (4, 1.0)]
    assert weighted("q_len", "1..4@2", "--q-len") == [(1, 2.0), (2, 2.0), (3, 2.0), (4, 2.0)]
    assert weighted("kv_len", "512..4096*2", "--kv-len") == [(512, 1.0), (1024, 1.0), (2048, 1.0), (4096, 1.0)]
    assert weighted("kv_dist", "fixed@1,lognormal:1@3", "--kv-dist") == [("fixed", 1.0), ("lognormal:1.0", 3.0)]
    assert weighted("power", "both", "--power") == [("unthrottled", 1.0), ("sustained", 1.0)]
    for text, msg in (("1@-1", "must be a number from 0 to 1e\\+12"), ("1@x", "is not a number"),
                      ("1@0,2@0", "every weight is 0"), ("0", "must be >= 1"), ("", "empty value"),
                      ("16@1e308,8@1e308", r"weight '1e308' must be a number from 0 to 1e\+12"),  # was NaN us/step
                      ("1@inf", "must be a number from 0"), ("2000000", r"batch_size 2000000 is more than 1,048,576"),
                      ("\u0661\u0666", "digits 0-9")):
        with pytest.raises(BadInput, match=msg):
            weighted("batch_size", text, "--batch-size")
    with pytest.raises(BadInput, match="beyond draft-extend shapes"):
        weighted("q_len", "65", "--q-len")
    # a KV length the kernels' int32 indices cannot hold: refused as kbench sweep -k refuses it (was priced clamped
    # with --max-extrapolation inf); lognormal's MEDIAN and its bins are held to the same bounds
    for name, text, msg in (("kv_len", "99999999999999999999", "kv_len 99999999999999999999 is more than 2,147,483,647"),
                            ("kv_len", "lognormal:1e300:5", "MEDIAN in 1..2147483647"),
                            ("kv_len", "lognormal:2000000000:1", "is more than 2,147,483,647 (the int32 indices"),
                            ("q_len", "lognormal:100:0", "MEDIAN in 1..64")):
        with pytest.raises(BadInput, match=re.escape(msg)):
            weighted(name, text, f"--{name}")


def test_lognormal_bins_are_equal_probability_quantiles():
    bins = lognormal_bins(4096, 1.0, 16)
    assert sum(w for _, w in bins) == pytest.approx(1.0)
    vals = [v for v, _ in bins]
    assert vals == sorted(vals) and len(vals) == 16
    # symmetric in log space around the median: the middle two bins straddle it
    assert math.log(vals[7] * vals[8]) / 2 == pytest.approx(math.log(4096), abs=0.01)
    assert lognormal_bins(100, 0.0, 4) == [(100, 1.0)]  # sigma 0: one value, the weights merged
    assert weighted("kv_len", "lognormal:4096:1.0:4", "--kv-len") == lognormal_bins(4096, 1.0, 4)
    for spec in ("lognormal:4096", "lognormal:x:1", "lognormal:4096:9", "lognormal:0.5:1"):
        with pytest.raises(BadInput, match="lognormal"):
            weighted("kv_len", spec, "--kv-len")


def test_options_are_the_weighted_product():
    w = from_options({"batch_size": "1@3,8", "q_len": "4", "kv_len": "1024,4096"}, {"kv_dist": None, "power": "both"})
    assert len(w.batches) == 2 * 2 * 2 and w.total_weight == pytest.approx((3 + 1) * 2 * 2)
    b = [x for x in w.batches if x.batch_size == 1 and x.kv_len == 1024 and x.filters["power"] == "sustained"]
    assert len(b) == 1 and b[0].weight == 3.0
    with pytest.raises(BadInput, match="give the workload as --q-len"):
        from_options({"batch_size": "1", "q_len": None, "kv_len": "1"}, {})


def test_a_file_with_header_lists_and_group_axes(tmp_path):
    f = tmp_path / "w.jsonl"
    lines = [{"kbench_workload": 1, "source": "test"},
             {"batch_size": 4, "q_lens": [4, 4, 2, 1], "kv_lens": [900, 4100, 12000, 300], "count": 10},
             {"batch_size": 64, "q_len": 4, "kv_len": 4096, "kv_dist": "lognormal:1", "steps": ["verify"],
              "weight": 0.5, "case": "bs64-in4000-out96"}]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    w = read_workload(f)
    a, b = w.batches
    assert w.header["source"] == "test"
    assert (a.batch_size, a.q_len, a.kv_len, a.weight) == (4, 4, round((900 + 4100 + 12000 + 300) / 4), 10.0)
    assert any("padded to the longest (4)" in n for n in a.notes) and any("same total KV" in n for n in a.notes)
    assert b.filters == {"kv_dist": "lognormal:1.0"} and b.steps == ("verify",) and b.case == "bs64-in4000-out96"
    assert a.label == "line 2"


@pytest.mark.parametrize("line, msg", [
    ('{"batch_size": 4, "q_len": 4}', "give kv_len or kv_lens"),
    ('{"batch_size": 4, "q_len": 4, "kv_len": 2, "weight": 1}', "q_len 4 > kv_len 2"),
    ('{"batch_size": 4, "q_len": 4, "kv_len": 64, "bogus": 1}', "unknown field 'bogus'"),
    ('{"batch_size": 2, "q_lens": [1, 2, 3], "kv_len": 64}', "q_lens has 3 values for batch_size 2"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64, "weight": 1, "count": 1}', "weight or count"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64, "count": 1.5}', "count must be an integer"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64, "steps": ["prefill"]}', "steps must be"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64, "kv_dist": "gauss"}', "kv_dist"),
    ('{"batch_size": true, "q_len": 2, "kv_len": 64}', "batch_size must be an integer"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64, "weight": 1e308}', "weight must be a number from 0 to 1e+12"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 99999999999}', "kv_len 99999999999 is more than 2,147,483,647"),
    ('{"batch_size": 2, "q_len": 2, "kv_lens": [64, 3000000000]}', "kv_len 3000000000 is more than"),
    ('{"batch_size": 2000000, "q_len": 2, "kv_len": 64}', "batch_size 2000000 is more than 1,048,576"),
    ('[1, 2]', "expected a JSON object"),
    ('{"batch_size": 2, "q_len": 2, "kv_len": 64', "not JSON"),
    ('{"kbench_workload": 2}', "kbench_workload 2 is not 1"),
])
def test_a_bad_line_is_named(tmp_path, line, msg):
    f = tmp_path / "w.jsonl"
    good = '{"batch_size": 1, "q_len": 1, "kv_len": 8}'
    header = "kbench_workload" in line  # a header must come first
    f.write_text(f"{line}\n{good}\n" if header else f"{good}\n{line}\n")
    with pytest.raises(BadInput) as e:
        read_workload(f)
    assert msg in str(e.value) and f"w.jsonl: line {1 if header else 2}: " in str(e.value), str(e.value)


def test_files_that_are_not_workloads(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(BadInput, match="no batch in the file"):
        read_workload(empty)
    zero = tmp_path / "zero.jsonl"
    zero.write_text('{"batch_size": 1, "q_len": 1, "kv_len": 8, "weight": 0}\n')
    with pytest.raises(BadInput, match="every batch has weight 0"):
        read_workload(zero)
    late = tmp_path / "late.jsonl"
    late.write_text('{"batch_size": 1, "q_len": 1, "kv_len": 8}\n{"kbench_workload": 1}\n')
    with pytest.raises(BadInput, match="must come first"):
        read_workload(late)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"batch_size": 1}\xff\n')
    with pytest.raises(BadInput, match="not UTF-8"):
        read_workload(binary)
    with pytest.raises(BadInput, match="a folder, not a regular file"):
        read_workload(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="named pipe"):  # refused at once, never waits for a writer
        read_workload(fifo)
    with pytest.raises(BadInput, match="no such file"):
        read_workload(tmp_path / "missing.jsonl")


def test_the_published_schema_is_the_generated_one_and_agrees_with_the_reader():
    committed = json.loads(open(SCHEMA_FILE, encoding="utf-8").read())
    assert committed == workload_schema(), "regenerate: python -m kbench.recommend.workload > " + SCHEMA_FILE
    v = jsonschema.Draft202012Validator(committed)
    good = [{"kbench_workload": 1, "source": "x"}, {"batch_size": 4, "q_len": 4, "kv_len": 64},
            {"batch_size": 2, "q_lens": [1, 2], "kv_lens": [8, 9], "count": 3, "steps": ["draft_extend"]},
            {"batch_size": 2, "q_len": 2, "kv_len": 64, "sinks": "on", "window_left": 128, "power": "sustained"}]
    bad = [{"batch_size": 4, "q_len": 4}, {"batch_size": 4, "q_len": 4, "kv_len": 64, "x": 1},
           {"batch_size": 0, "q_len": 1, "kv_len": 8}, {"batch_size": 2, "q_len": 2, "kv_len": 64, "weight": 1, "count": 1},
           {"batch_size": 2, "q_len": 2, "kv_len": 64, "sinks": "maybe"}, {"batch_size": 2, "q_len": 99, "kv_len": 640},
           {"batch_size": 2, "q_len": 2, "kv_len": 2**31}, {"batch_size": 2, "q_len": 2, "kv_len": 64, "weight": 1e13}]
    for line in good:
        assert not list(v.iter_errors(line)), line
        if "kbench_workload" not in line:
            parse_line(line, "line 1")
    for line in bad:
        assert list(v.iter_errors(line)), line
        with pytest.raises(BadInput):
            parse_line(line, "line 1")


def test_the_example_workload_follows_the_schema_and_reads():
    v = jsonschema.Draft202012Validator(workload_schema())
    lines = [json.loads(x) for x in open("schemas/workload-example.jsonl", encoding="utf-8") if x.strip()]
    assert all(not list(v.iter_errors(x)) for x in lines)
    w = read_workload("schemas/workload-example.jsonl")
    assert len(w.batches) == len(lines) - 1 and w.header["gpu"] == "SM90"
