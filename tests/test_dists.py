"""Per-request length distributions (kbench.cases.dists): parsing, bad input, the lengths drawn, the summary."""
import json
import re

import pytest

from kbench.cases import axes
from kbench.cases.case import Case
from kbench.cases.dists import batch_lengths, length_summary, parse_dist
from kbench.errors import BadInput


@pytest.mark.parametrize("text,canon", [
    ("fixed", "fixed"), ("uniform:512..8192", "uniform:512..8192"), ("lognormal:1", "lognormal:1.0"),
    (" LogNormal:0.5 ", "lognormal:0.5"), ("zipf", "zipf:1.0"), ("zipf:1.5", "zipf:1.5"),
])
def test_kv_dist_parses_to_a_canonical_spelling(text, canon):
    assert parse_dist(text, "kv_dist").text == canon


@pytest.mark.parametrize("text,canon", [("fixed", "fixed"), ("accept:0.7", "accept:0.7"), ("accept:1", "accept:1.0")])
def test_q_dist_parses(text, canon):
    assert parse_dist(text, "q_dist").text == canon


@pytest.mark.parametrize("field,text,words", [
    ("kv_dist", "gauss:1", "unknown distribution 'gauss'"),
    ("kv_dist", "uniform:9..3", "needs 1 <= LO <= HI"),
    ("kv_dist", "uniform:abc", "uniform:LO..HI"),
    ("kv_dist", "uniform:1..99999999999", "HI 99999999999 overflows the int32 indices kernels take"),
    ("kv_dist", "lognormal", "needs a parameter"),
    ("kv_dist", "lognormal:x", "SIGMA must be a number"),
    ("kv_dist", "lognormal:-1", "SIGMA must be in"),
    ("kv_dist", "lognormal:nan", "must be finite"),
    ("kv_dist", "fixed:3", "takes no parameter"),
    ("kv_dist", "file:", "needs a path"),
    ("kv_dist", "accept:0.5", "unknown distribution 'accept'"),
    ("q_dist", "accept:1.5", "RATE must be in [0, 1]"),
    ("q_dist", "lognormal:1", "unknown distribution 'lognormal'"),
    ("q_dist", "", "expected one of"),
    ("q_dist", 3, "expected one of"),
])
def test_bad_distribution_is_one_line_naming_the_field(field, text, words):
    with pytest.raises(BadInput) as e:
        parse_dist(text, field, "grid")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"grid: {field}: ") and words in msg


@pytest.mark.parametrize("bs, kv_dist, words", [
    (1, "uniform:1..99999999999", "HI 99999999999 overflows the int32 indices"),  # as -k 99999999999 is
    (2, "uniform:1..2000000000", "batch_size 2 x kv_dist uniform:1..2000000000 (requests up to 2000000000) "
                                 "overflows the int32 indices"),
    (2, "file:{lens}", "holds 4000000000 KV tokens, which overflows the int32 indices"),
])
def test_a_distributions_lengths_are_bounded_by_int32_up_front(tmp_path, bs, kv_dist, words):
    from kbench.cases.scenario import scenario_from_dict

    lens = tmp_path / "lens.txt"
    lens.write_text("2000000000\n" * 4)
    grid = {"batch_size": bs, "q_len": 1, "kv_len": 512, "kv_dist": kv_dist.format(lens=lens)}
    with pytest.raises(BadInput, match=re.escape(words)):
        scenario_from_dict({"model": "llama3-8b", "grid": grid, "kernels": ["reference"]}, "s.toml")
    ok = scenario_from_dict({"model": "llama3-8b", "kernels": ["reference"],
                             "grid": {**grid, "batch_size": 1, "kv_dist": "uniform:1..2147483647"}}, "s.toml")
    assert ok.kv_dist == ["uniform:1..2147483647"]  # the bound itself is taken


def test_fixed_is_the_idealised_batch():
    b = batch_lengths("fixed", "fixed", 4, 1000, 3)
    assert b.kv == (1000,) * 4 and b.q == (3,) * 4 and b.uniform_q and b.padded_kv() == b.kv


def test_lognormal_keeps_the_total_and_spreads_it():
    b = batch_lengths("lognormal:1.0", "fixed", 64, 4096, 4, seed=0)
    assert b.total_kv == 64 * 4096
    assert min(b.kv) >= 4 and max(b.kv) > 2 * 4096 and min(b.kv) < 4096 // 2
    again = batch_lengths("lognormal:1.0", "fixed", 64, 4096, 4, seed=0)
    other = batch_lengths("lognormal:1.0", "fixed", 64, 4096, 4, seed=1)
    assert again == b and other != b  # seeded


def test_zipf_and_uniform():
    z = batch_lengths("zipf", "fixed", 16, 1000, 2)
    assert z.total_kv == 16000 and max(z.kv) > 4 * min(z.kv)
    u = batch_lengths("uniform:100..200", "fixed", 256, 1, 4)
    assert 100 <= min(u.kv) and max(u.kv) <= 200 and len(set(u.kv)) > 20


def test_accept_rate_gives_one_plus_accepted_drafts():
    assert batch_lengths("fixed", "accept:0", 32, 100, 8).q == (1,) * 32
    assert batch_lengths("fixed", "accept:1", 32, 100, 8).q == (8,) * 32
    b = batch_lengths("fixed", "accept:0.7", 4000, 100, 4, seed=3)
    assert set(b.q) <= {1, 2, 3, 4} and not b.uniform_q
    # P(q = 1) = 0.3, P(q = 4) = 0.7**3 = 0.343
    assert abs(b.q.count(1) / 4000 - 0.3) < 0.03 and abs(b.q.count(4) / 4000 - 0.343) < 0.03
    assert b.padded_kv() == tuple(k + 4 - q for k, q in zip(b.kv, b.q))


def test_lengths_from_csv_and_json_files(tmp_path):
    csv = tmp_path / "kv.csv"
    csv.write_text("100, 200\n300\n400,500\n")
    js = tmp_path / "q.json"
    js.write_text(json.dumps([1, 2, 3, 1]))
    b = batch_lengths(f"file:{csv}", f"file:{js}", 4, 0, 3)
    assert b.kv == (100, 200, 300, 400) and b.q == (1, 2, 3, 1)


@pytest.mark.parametrize("content,words", [
    ("", "holds no lengths"), ("[]", "holds no lengths"), ("1,-5,3", "value 2 is -5"),
    ("1,x,3", "value 2 is not an integer"), ("[1, 2.5]", "value 2 is not an integer"),
    ('{"a": 1}', "not a JSON list"), ("[1, 2", "not a JSON list"), ("100,200", "holds 2 lengths; batch_size 4"),
    ("1,2,\u0663,4", "value 3 is not an integer"),  # Arabic-Indic 3: ASCII digits only
])
def test_bad_length_files_are_refused_with_one_line(tmp_path, content, words):
    f = tmp_path / "lens.txt"
    f.write_text(content)
    with pytest.raises(BadInput) as e:
        batch_lengths(f"file:{f}", "fixed", 4, 0, 1, where="grid")
    assert "\n" not in str(e.value) and "kv_dist" in str(e.value) and words in str(e.value)


def test_missing_file_and_q_above_q_len_and_above_kv(tmp_path):
    with pytest.raises(BadInput, match="kv_dist: cannot read"):
        batch_lengths(f"file:{tmp_path / 'nope.csv'}", "fixed", 2, 0, 1)
    q = tmp_path / "q.csv"
    q.write_text("1,5")
    with pytest.raises(BadInput, match="q_dist: .* q length of 5 above q_len 4"):
        batch_lengths("fixed", f"file:{q}", 2, 100, 4)
    kv = tmp_path / "kv.csv"
    kv.write_text("100,3")
    q.write_text("2,4")
    with pytest.raises(BadInput, match="q_dist: request 1 has 4 query tokens but a KV length of 3"):
        batch_lengths(f"file:{kv}", f"file:{q}", 2, 0, 4)


def test_summary_records_mean_max_min_and_a_hash():
    s = length_summary("kv", [1, 2, 3])
    assert s["kv_mean"] == 2.0 and s["kv_max"] == 3 and s["kv_min"] == 1 and len(s["kv_hash"]) == 12
    assert length_summary("kv", [1, 2, 4])["kv_hash"] != s["kv_hash"]
    assert length_summary("kv", [3, 2, 1])["kv_hash"] != s["kv_hash"]  # order is part of the batch


def test_case_id_unchanged_by_defaults_and_suffixed_otherwise():
    base = Case(16, 4, 4096, 32, 8, 128)
    assert base.case_id == "bs16-q4-kv4096-h32.8.128-p64-HND-bf16" and not base.realistic
    c = Case(16, 4, 4096, 32, 8, 128, kv_dist="lognormal:1", q_dist="accept:0.7", window_left=128, sinks="on",
             max_seq_len="context:131072")
    assert c.case_id == base.case_id + "-kvlognormal1.0-qaccept0.7-w128-sinks-msl131072" and c.realistic


def test_case_bytes_follow_the_real_lengths():
    base = Case(16, 4, 4096, 32, 8, 128)
    ln = Case(16, 4, 4096, 32, 8, 128, kv_dist="lognormal:1")
    assert ln.kv_bytes() == base.kv_bytes()  # same total KV, spread unevenly
    w = Case(2, 4, 4096, 32, 8, 128, window_left=128)
    assert w.kv_tokens_read() == 2 * (128 + 4)
    acc = Case(64, 4, 4096, 32, 8, 128, q_dist="accept:0.5")
    assert acc.qo_bytes() < base.qo_bytes() * 4


@pytest.mark.parametrize("text,canon", [("tight", "tight"), ("context:131072", "context:131072"),
                                        ("CONTEXT:4096", "context:4096")])
def test_max_seq_len_parses(text, canon):
    assert axes.AXIS["max_seq_len"].parse(text, "grid.max_seq_len", "f.toml") == [canon]


@pytest.mark.parametrize("text", ["context:", "context:-1", "context:x", "131072", "loose"])
def test_bad_max_seq_len_is_one_line(text):
    with pytest.raises(BadInput, match="^f.toml: grid.max_seq_len: expected 'tight' or 'context:N'"):
        axes.AXIS["max_seq_len"].parse(text, "grid.max_seq_len", "f.toml")


def test_max_seq_len_value_never_below_the_longest():
    c = Case(1, 1, 100, 8, 1, 64, max_seq_len="context:50")
    assert c.max_seq_len_value(100) == 100
    assert Case(1, 1, 100, 8, 1, 64, max_seq_len="context:131072").max_seq_len_value(100) == 131072


@pytest.mark.parametrize("text,canon", [("off", "off"), ("1000", "1000"), ("1e3", "1000"), ("0.5", "0.5")])
def test_skip_softmax_parses(text, canon):
    assert axes.AXIS["skip_softmax"].parse(text, "grid.skip_softmax", "f.toml") == [canon]


@pytest.mark.parametrize("text", ["0", "-1", "on", "nan", "inf"])
def test_bad_skip_softmax_is_one_line(text):
    with pytest.raises(BadInput, match="^f.toml: grid.skip_softmax: expected 'off' or a positive number"):
        axes.AXIS["skip_softmax"].parse(text, "grid.skip_softmax", "f.toml")
