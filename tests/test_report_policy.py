"""Policy build, lookup between grid points, range refusal, schema validation and regret (known answers)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_synth import DECODE, FA2, case, flip_back_rows, row, write_run

from kbench.errors import BadInput
from kbench.report import build_report
from kbench.report.policy import POLICY_SCHEMA, build_policy, edges, load_policy, lookup, nearest, rule_for, save_policy
from kbench.report.regret import holdout_split, regret
from kbench.report.runs import combine
from kbench.runs.winners import case_winners, measured


def policy_of(tmp_path, rows, name="run"):
    rs = combine([write_run(tmp_path / name, rows)])
    cases = case_winners(rs.rows)
    return build_policy(cases, rs.device, rs.sources()), rs, cases


def split_rows():
    """bs 1: decode wins everywhere; bs 8: context wins everywhere; q measured at 1, 4, 8 only."""
    rows = []
    for kv in (1024, 4096):
        for q in (1, 4, 8):
            rows += [row(DECODE, case(1, q, kv), 10.0), row(FA2, case(1, q, kv), 20.0),
                     row(DECODE, case(8, q, kv), 40.0), row(FA2, case(8, q, kv), 20.0)]
    return rows


def test_nearest_is_log_in_bs_and_kv_linear_in_q_and_halfway_goes_down():
    assert nearest([1, 8], 2, "batch_size") == 1 and nearest([1, 8], 3, "batch_size") == 8  # 2*2 <= 8 < 3*3
    assert nearest([1024, 4096], 2048, "kv_len") == 1024 and nearest([1024, 4096], 2049, "kv_len") == 4096
    assert nearest([1, 4, 8], 2, "q_len") == 1 and nearest([1, 4, 8], 3, "q_len") == 4
    assert nearest([1, 4, 8], 6, "q_len") == 4 and nearest([1, 4, 8], 7, "q_len") == 8
    assert edges([1, 4, 8], "q_len") == {1: (1, 2), 4: (3, 6), 8: (7, 8)}
    assert edges([1, 8], "batch_size") == {1: (1, 2), 8: (3, 8)}


def test_lookup_exact_point_is_not_interpolated(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    a = lookup(pol, 8, 4, 4096)
    assert a["kernel"] == FA2 and a["path"] == "context" and a["expected_speedup"] == pytest.approx(0.5)
    assert a["interpolated"] is False and a["method"] == "measured" and a["neighbours"] == []


def test_lookup_between_grid_points_uses_nearest_neighbours_and_says_so(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    a = lookup(pol, 2, 3, 2000)
    assert a["interpolated"] is True and a["extrapolated"] is False
    assert a["used"] == {"batch_size": 1, "kv_len": 1024, "q_len": 4}
    assert a["kernel"] == DECODE and a["expected_speedup"] == pytest.approx(2.0)
    got = {(n["batch_size"], n["kv_len"], n["q_len"]): n["kernel"] for n in a["neighbours"]}
    assert got == {(bs, kv, q): DECODE if bs == 1 else FA2 for bs in (1, 8) for kv in (1024, 4096) for q in (1, 4)}
    assert a["neighbours_agree"] is False
    b = lookup(pol, 3, 3, 2000)  # bs 3 is log-nearer to 8
    assert b["kernel"] == FA2 and b["used"]["batch_size"] == 8


def test_outside_range_refused_unless_extrapolate(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    for bs, q, kv in ((16, 4, 1024), (1, 9, 1024), (1, 4, 512)):
        with pytest.raises(BadInput, match="outside the measured range"):
            lookup(pol, bs, q, kv)
    a = lookup(pol, 64, 20, 100000, extrapolate=True)
    assert a["extrapolated"] is True and a["kernel"] == FA2
    assert a["used"] == {"batch_size": 8, "kv_len": 4096, "q_len": 8}
    assert a["clamped"] == ["batch_size 64 -> 8", "kv_len 100000 -> 4096", "q_len 20 -> 8"]


def test_group_selection(tmp_path):
    rows = split_rows() + [row(DECODE, case(1, 1, 1024, heads=(8, 1, 128)), 5.0)]
    pol, _, _ = policy_of(tmp_path, rows)
    with pytest.raises(BadInput, match="2 groups match") as e:
        lookup(pol, 1, 1, 1024)
    # the filters that tell them apart, each group's value: what to pass
    assert str(e.value) == "2 groups match; narrow with --heads: --heads 8/1/128; --heads 32/8/128"
    assert lookup(pol, 1, 1, 1024, heads="8/1/128")["expected_speedup"] is None  # no context row there
    with pytest.raises(BadInput, match="no measured group"):
        lookup(pol, 1, 1, 1024, heads="64/8/128")
    with pytest.raises(BadInput, match="QO/KV/DIM"):
        lookup(pol, 1, 1, 1024, heads="32-8")


def test_select_reads_every_filter_in_any_accepted_spelling_as_export_does(tmp_path):
    # kbench select, lookup() and the exported selector must give one answer: BF16, hnd and "64" are the same
    # group as bf16, HND and 64 (the realistic axes always were: lognormal:1 for lognormal:1.0)
    from report_synth import cli

    rows = split_rows() + [row(DECODE, case(1, 1, 1024, heads=(8, 1, 128)), 5.0)]
    pol, _, _ = policy_of(tmp_path, rows)
    spelled = dict(heads=" 8/1/128", dtype="BF16", kv_dtype="Bf16", page_size="64", kv_layout="hnd")
    want = lookup(pol, 1, 1, 1024, heads="8/1/128", dtype="bf16", kv_dtype="bf16", page_size=64, kv_layout="HND")
    assert lookup(pol, 1, 1, 1024, **spelled) == want
    with pytest.raises(BadInput, match=r"select: --kv-layout: 'hdn' is not one of"):
        lookup(pol, 1, 1, 1024, heads="8/1/128", kv_layout="hdn")
    with pytest.raises(BadInput, match="no measured group"):  # a valid value no group has is still no match
        lookup(pol, 1, 1, 1024, heads="8/1/128", page_size=16)
    f = tmp_path / "policy.json"
    save_policy(pol, f)
    r = cli("select", "--policy", f, "--batch-size", 1, "--q-len", 1, "--kv-len", 1024, "--heads", "8/1/128",
            "--dtype", "BF16", "--page-size", "64", "--kv-layout", "hnd", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["kernel"] == want["kernel"]
    assert cli("export", f, "--out", tmp_path / "sel.py").exit_code == 0
    ns: dict = {}
    exec(compile((tmp_path / "sel.py").read_text(), "sel.py", "exec"), ns)
    assert ns["lookup"](1, 1, 1024, **spelled) == want


def test_rules_are_ranges_of_the_flip_back(tmp_path):
    pol, _, _ = policy_of(tmp_path, flip_back_rows())
    (g,) = pol["groups"]
    assert g["heads"] == "32/8/128" and g["grid"]["q_len"] == list(range(1, 17))
    at = [(r["q_len"], r["kernel"], r["cases"]) for r in g["rules"]
          if r["measured"]["batch_size"] == 1 and r["measured"]["kv_len"] == 1024]
    assert at == [([1, 3], DECODE, 3), ([4, 8], FA2, 5), ([9, 16], DECODE, 8)]
    r = g["rules"][0]
    assert r["batch_size"] == [1, 2] and r["kv_len"] == [1024, 2048]
    assert r["expected_speedup"] == pytest.approx(1.5) and r["min_speedup"] == pytest.approx(1.5)


@settings(max_examples=300, deadline=None)
@given(bs=st.integers(1, 8), q=st.integers(1, 8), kv=st.integers(1024, 4096))
def test_rules_tile_the_box_and_agree_with_lookup(tmp_path_factory, bs, q, kv):
    if "p" not in _SPLIT_POLICY:  # built once: hypothesis calls this test hundreds of times
        _SPLIT_POLICY["p"] = policy_of(tmp_path_factory.mktemp("p"), split_rows())[0]
    pol = _SPLIT_POLICY["p"]
    g = pol["groups"][0]
    holding = [r for r in g["rules"] if all(r[ax][0] <= v <= r[ax][1] for ax, v in
                                            (("batch_size", bs), ("q_len", q), ("kv_len", kv)))]
    assert len(holding) == 1
    assert holding[0]["kernel"] == lookup(pol, bs, q, kv)["kernel"] == rule_for(g, bs, q, kv)["kernel"]


_SPLIT_POLICY: dict = {}


def test_save_load_roundtrip_and_validation(tmp_path):
    pol, _, _ = policy_of(tmp_path, split_rows())
    p = save_policy(pol, tmp_path / "policy.json")
    assert load_policy(p) == json.loads(p.read_text()) == pol and load_policy(p)["schema"] == POLICY_SCHEMA
    # indented by 2, and a line per rule and cell: the decision a line greps for
    lines = p.read_text().splitlines()
    cells = [json.loads(ln.strip().rstrip(",")) for ln in lines if ln.lstrip().startswith('{"batch_size"')]
    assert cells == [x for g in pol["groups"] for part in ("rules", "cells") for x in g[part]]
    assert lines[1].startswith('  "schema": ') and len(lines) < 100 + len(cells)
    bad = dict(pol, schema="kbench.policy/3")
    (tmp_path / "v3.json").write_text(json.dumps(bad))
    with pytest.raises(BadInput, match="not 'kbench.policy/2'"):
        load_policy(tmp_path / "v3.json")
    (tmp_path / "trunc.json").write_text(p.read_text()[: len(p.read_text()) // 2])
    with pytest.raises(BadInput, match="not valid JSON"):
        load_policy(tmp_path / "trunc.json")
    broken = json.loads(p.read_text())
    broken["groups"][0]["cells"][0]["q_len"] = "4"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match=r"broken.json: group 32/8/128 bf16 p64 HND: cells\[0\]: q_len '4' is not an integer$"):
        load_policy(tmp_path / "broken.json")
    del broken["groups"][0]["grid"]
    (tmp_path / "nogrid.json").write_text(json.dumps(broken))
    with pytest.raises(BadInput, match="missing 'grid'"):
        load_policy(tmp_path / "nogrid.json")


def one_loser_rows():
    """q 1..8 at one (bs, kv): decode wins by 2x everywhere except q 5, where context wins by 2x."""
    out = []
    for q in range(1, 9):
        c = case(1, q, 1024)
        out += [row(DECODE, c, 20.0 if q == 5 else 10.0), row(FA2, c, 10.0 if q == 5 else 20.0)]
    return out


def test_in_sample_regret_is_zero_and_holdout_regret_has_the_known_answer(tmp_path):
    run = write_run(tmp_path / "run", one_loser_rows())
    q5 = case(1, 5, 1024).case_id
    ids = [case(1, q, 1024).case_id for q in range(1, 9)]
    seed_in = next(s for s in range(100) if q5 in holdout_split(ids, 0.25, s)[1])
    # with q 4, 5 and 6 all trained, no held-out case has q 5 as its nearest neighbour: regret 0
    seed_out = next(s for s in range(100) if not {ids[3], ids[4], ids[5]} & set(holdout_split(ids, 0.25, s)[1]))
    res = build_report([run], tmp_path / "a", holdout=0.25, seed=seed_in)
    assert res.regret.cases == 8 and res.regret.mean_pct == 0 and res.regret.worst_pct == 0
    h = res.holdout_regret
    assert h.cases == 2 and h.worst_pct == pytest.approx(100.0) and h.worst_case == q5
    assert h.mean_pct == pytest.approx(50.0)  # the other held-out case keeps decode: 0%
    held = set(res.holdout_policy["holdout"]["held_out"])
    assert q5 in held and len(held) == 2
    trained = {case(1, c["q_len"], 1024).case_id for c in res.holdout_policy["groups"][0]["cells"]}
    assert trained.isdisjoint(held) and len(trained) == 6
    res2 = build_report([run], tmp_path / "b", holdout=0.25, seed=seed_out)
    assert res2.holdout_regret.worst_pct == 0


def test_holdout_split_is_seeded_and_disjoint():
    ids = [f"c{i}" for i in range(10)]
    tr, te = holdout_split(ids, 0.3, 7)
    assert (tr, te) == holdout_split(ids, 0.3, 7) and len(te) == 3 and not set(tr) & set(te)
    assert set(tr) | set(te) == set(ids)
    for f in (0, 1, 1.5, -0.1):
        with pytest.raises(BadInput):
            holdout_split(ids, f)
    with pytest.raises(BadInput):
        holdout_split(["only"], 0.5)


def test_regret_counts_a_policy_kernel_that_was_not_usable(tmp_path):
    pol, rs, cases = policy_of(tmp_path, [row(DECODE, case(1, 1, 1024), 10.0), row(FA2, case(1, 1, 1024), 15.0)])
    rs2 = combine([write_run(tmp_path / "later", [row(DECODE, case(1, 1, 1024), 10.0, status="wrong"),
                                                  row(FA2, case(1, 1, 1024), 15.0)])])
    r = regret(pol, measured(rs2.rows), case_winners(rs2.rows), "later run")
    assert r.unavailable == 1 and r.mean_pct is None and r.per_case.iloc[0]["chosen"] == DECODE


def test_a_schema_1_policy_is_read_as_idealised_batches_and_selects(tmp_path):
    """Policies written before the realistic-batch axes (schema /1, no kv_dist/q_dist/... in a group) still
    load: their groups are the idealised batch, and select filters on the new axes answer from them."""
    pol, _, _ = policy_of(tmp_path, split_rows())
    old = json.loads(json.dumps(pol))
    old["schema"] = "kbench.policy/1"
    for g in old["groups"]:
        for k in ("kv_dist", "q_dist", "window_left", "sinks", "max_seq_len"):
            del g[k]
    (tmp_path / "v1.json").write_text(json.dumps(old))
    loaded = load_policy(tmp_path / "v1.json")
    assert all(g["kv_dist"] == "fixed" and g["window_left"] == -1 and g["max_seq_len"] == "tight"
               for g in loaded["groups"])
    g = pol["groups"][0]
    bs, q, kv = g["grid"]["batch_size"][0], g["grid"]["q_len"][0], g["grid"]["kv_len"][0]
    assert lookup(loaded, bs, q, kv, sinks="off", kv_dist="fixed")["kernel"] == lookup(pol, bs, q, kv)["kernel"]
    with pytest.raises(BadInput, match="no measured group matches"):
        lookup(loaded, bs, q, kv, window_left="128")
    with pytest.raises(BadInput, match="--window-left: values must be >= -1"):
        lookup(loaded, bs, q, kv, window_left="-3")


# ---- hostile policy files (issue #25): one line naming the file, the group, the cell and the field ----------------
# the committed baselines by name (helpers.COMMITTED_BASELINES), never whatever a user added to results/baselines/
from helpers import COMMITTED_BASELINES  # noqa: E402

BASELINES = [Path(__file__).resolve().parent.parent / "results" / "baselines" / n for n in COMMITTED_BASELINES
             if "-layers-" not in n]  # kbench layers runs are not sweeps: tests/test_whole_step.py reads them
G = "group 32/8/128 bf16 p64 HND"
C = f"{G}: cell bs 16 q 4 kv 4096"


@pytest.fixture(scope="module")
def baseline_policy(tmp_path_factory):
    """The committed kv4096 baseline's policy.json, as `kbench report` writes it (32 cells: bs 16, 64 x q 1..16)."""
    out = tmp_path_factory.mktemp("rep") / "rep"
    build_report([BASELINES_BY_NAME["h200-draft-extend-kv4096"]], out)
    return json.loads((out / "policy.json").read_text())


BASELINES_BY_NAME = {p.name: p for p in BASELINES}


def _cell(p, bs=16, q=4, kv=4096):
    return next(c for c in p["groups"][0]["cells"] if (c["batch_size"], c["q_len"], c["kv_len"]) == (bs, q, kv))


def _dup(p):
    p["groups"][0]["cells"].append({**_cell(p), "kernel": "fa2-prefill", "path": "context"})


def _sparse(p):  # 5 of the grid's 32 cells, the grid unchanged
    p["groups"][0]["cells"] = p["groups"][0]["cells"][:5]


# (id, edit, the line after 'FILE: ', whether the published JSON Schema alone refuses it too)
HOSTILE = [
    ("time-us-text", lambda p: _cell(p).update(time_us="x"), f"{C}: time_us 'x' is not a number", True),
    ("time-us-nan", lambda p: _cell(p).update(time_us=float("nan")),
     f"{C}: time_us nan is not a number (JSON has no NaN or Infinity)", False),
    ("time-us-infinite", lambda p: _cell(p).update(time_us=float("inf")),
     f"{C}: time_us inf is not a number (JSON has no NaN or Infinity)", False),
    ("time-us-zero", lambda p: _cell(p).update(time_us=0), f"{C}: time_us 0 is not above 0", True),
    ("path-banana", lambda p: _cell(p).update(path="banana"), f"{C}: path 'banana' is not one of decode, context", True),
    ("verdict-7", lambda p: _cell(p).update(verdict=7), f"{C}: verdict 7 is not a string", True),
    ("verdict-word", lambda p: _cell(p).update(verdict="maybe"),
     f"{C}: verdict 'maybe' is not one of decode, context, tie, decode-only, context-only", True),
    ("kernel-newline", lambda p: _cell(p).update(kernel="evil\nkernel"),
     f"{C}: kernel 'evil\\nkernel' holds a character that does not print ('\\n')", True),
    ("kernel-quotes", lambda p: _cell(p).update(kernel='x"""+1'),
     f"{C}: kernel 'x\"\"\"+1' does not match ^[A-Za-z0-9][A-Za-z0-9._+-]{{0,63}}$", True),
    ("kernels-us-name", lambda p: _cell(p)["kernels_us"].update({"a b": 1.0}),
     f"{C}: kernels_us['a b'] 'a b' does not match ^[A-Za-z0-9][A-Za-z0-9._+-]{{0,63}}$", True),
    ("label-escape", lambda p: p["groups"][0].update(label="\x1b[2Jgone"),
     f"{G}: label '\\x1b[2Jgone' holds a character that does not print ('\\x1b')", False),
    ("device-name-quotes", lambda p: p["device"].update(name='H"""\nimport os'),
     "device.name 'H\"\"\"\\nimport os' holds a character that does not print ('\\n')", False),
    ("duplicate-cell", _dup, f"{C}: a second cell for this shape (cells[3] trtllm-decode, cells[32] fa2-prefill): "
                             "one cell a measured shape", False),
    ("cell-off-grid", lambda p: p["groups"][0]["cells"].append({**_cell(p), "batch_size": 9999}),
     f"{G}: cell bs 9999 q 4 kv 4096: batch_size 9999 is not in the group's grid (16, 64)", False),
    ("grid-without-cells", _sparse,
     f"{G}: grid.batch_size lists 64, but no cell has it (the grid is the values measured)", False),
    ("grid-twice", lambda p: p["groups"][0]["grid"]["batch_size"].append(16), f"{G}: grid.batch_size lists 16 twice",
     True),
    ("q-above-kv", lambda p: (p["groups"][0]["grid"]["kv_len"].append(2), p["groups"][0]["cells"].append(
        {**_cell(p), "kv_len": 2})), f"{G}: cell bs 16 q 4 kv 2: q_len 4 > kv_len 2: no such shape (the query tokens "
                                     "are part of the KV)", False),
    ("group-twice", lambda p: p["groups"].append(json.loads(json.dumps(p["groups"][0]))),
     f"{G}: the same group as groups[0] (one group a key)", False),
    ("dtype-word", lambda p: p["groups"][0].update(dtype="fp64"),
     "group 32/8/128 fp64-kvbf16 p64 HND: dtype 'fp64' is not one of bf16, fp16", True),
    ("speedup-negative", lambda p: _cell(p).update(expected_speedup=-1.5),
     f"{C}: expected_speedup -1.5 is not above 0", True),
    # what the schema cannot say: a group value kbench could not have written, heads that disagree, no group
    ("tree-word", lambda p: p["groups"][0].update(tree="topk:banana"),
     "group 32/8/128 bf16 p64 HND tree=topk:banana: tree topk:K needs an integer K (digits 0-9), got 'topk:banana'",
     False),
    ("heads-disagree", lambda p: p["groups"][0].update(heads="64/8/128"),
     f"{G}: num_qo_heads 32 is not the heads' 64 (64/8/128)", False),
    ("mla-on-gqa-heads", lambda p: p["groups"][0].update(attention="mla", kv_lora_rank=0),
     "group mla h32 0+0 (nope 0) bf16 p64: attention 'mla' is not the heads' 'gqa' (32/8/128)", False),
    ("fp8-query-on-bf16-kv", lambda p: p["groups"][0].update(q_dtype="fp8"),
     "group 32/8/128 bf16 p64 HND q_dtype=fp8: q_dtype fp8 needs kv_dtype fp8 (kernels take an fp8 query only with an "
     "fp8 KV cache), got kv_dtype bf16", False),
    ("tree-not-as-written", lambda p: p["groups"][0].update(tree="TOPK:2"),
     "group 32/8/128 bf16 p64 HND tree=TOPK:2: tree is not written as kbench writes it ('topk:2')", False),
    ("no-group", lambda p: p.update(groups=[]), "groups is empty (kbench writes a policy only from measured rows)",
     False),
]


def _hostile(tmp_path, policy, edit) -> Path:
    """A copy of the policy, edited, outside any report folder (select checks a policy beside its report.json)."""
    p = json.loads(json.dumps(policy))
    edit(p)
    f = tmp_path / "P.json"
    f.write_text(json.dumps(p, indent=1))  # NaN and Infinity written as Python's json writes them
    return f


@pytest.mark.parametrize("name,edit,line,schema_too", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_policy_is_one_line_naming_the_file_group_cell_and_field(tmp_path, baseline_policy, name, edit,
                                                                           line, schema_too):
    f = _hostile(tmp_path, baseline_policy, edit)
    with pytest.raises(BadInput) as e:
        load_policy(f)
    assert str(e.value) == f"{f}: {line}"


@pytest.mark.parametrize("name,edit,line,schema_too", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_select_and_export_refuse_a_hostile_policy(tmp_path, baseline_policy, name, edit, line, schema_too):
    from report_synth import cli

    f = _hostile(tmp_path, baseline_policy, edit)
    for args in (["select", "--policy", f, "--batch-size", 64, "--q-len", 16, "--kv-len", 4096],
                 ["export", f, "--out", tmp_path / "sel.py"]):
        r = cli(*args)
        assert r.exit_code == 2 and r.output == f"error: {f}: {line}\n", r.output
    assert not (tmp_path / "sel.py").exists()


@pytest.mark.parametrize("name,edit,line,schema_too", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_published_schema_refuses_what_it_can_say(tmp_path, baseline_policy, name, edit, line, schema_too):
    """One concept: the check interprets schemas/policy.schema.json, so what the schema refuses the check refuses;
    the rest (NaN, characters that do not print, cells against the grid, twins) is what no JSON Schema says."""
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "policy.schema.json").read_text())
    p = json.loads(json.dumps(baseline_policy))
    edit(p)
    assert bool(list(jsonschema.Draft202012Validator(schema).iter_errors(p))) is schema_too


def test_the_check_interprets_every_keyword_the_schema_uses():
    from kbench.report.policy_schema import ANNOTATIONS, KEYWORDS, policy_schema

    used: set = set()
    todo = [policy_schema()]
    while todo:
        s = todo.pop()
        used |= set(s)
        todo += [s[k] for k in ("items", "additionalProperties", "propertyNames") if isinstance(s.get(k), dict)]
        todo += list(s.get("properties", {}).values())
    assert used <= KEYWORDS | ANNOTATIONS, used - KEYWORDS - ANNOTATIONS


@settings(max_examples=150, deadline=None)
@given(data=st.data(), value=st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.floats(-2, 2),
                                       st.sampled_from(["", "x", "decode", "tie", "bf16", "HND", "16", "a b"]),
                                       st.just([]), st.just({}), st.just([16, 16])),
       delete=st.booleans())
def test_whatever_the_schema_refuses_the_check_refuses(baseline_policy, data, value, delete):
    import jsonschema

    from kbench.report.policy_schema import policy_schema
    from kbench.report.policy import validate_policy

    p = json.loads(json.dumps(baseline_policy))
    paths, todo = [], [((), p)]
    while todo:
        path, v = todo.pop()
        paths.append(path)
        items = v.items() if isinstance(v, dict) else enumerate(v[:2]) if isinstance(v, list) else ()
        todo += [(path + (k,), x) for k, x in items]
    path = data.draw(st.sampled_from([q for q in paths if q]))
    parent = p
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    schema_refuses = bool(list(jsonschema.Draft202012Validator(policy_schema()).iter_errors(p)))
    try:
        validate_policy(p, "P")
        refused = False
    except BadInput as e:
        refused = True
        assert "\n" not in str(e) and str(e).startswith("P: ")
    assert refused or not schema_refuses, path


@pytest.mark.parametrize("run", BASELINES, ids=[p.name for p in BASELINES])
def test_every_committed_baseline_reports_a_policy_select_and_export_read(tmp_path, run):
    from report_synth import cli

    r = cli("report", run, "--out", tmp_path / "rep", "--plot-groups", 0)
    assert r.exit_code == 0, r.output
    f = tmp_path / "rep" / "policy.json"
    pol = load_policy(f)
    # the first group, named by the group axes its groups differ in (power state, tree, KV dtype, heads)
    from kbench.cases import axes
    from kbench.report.policy import GROUP_FILTERS

    first = pol["groups"][0]
    differ = {k: first[k] for k in GROUP_FILTERS if k in first and len({str(g.get(k)) for g in pol["groups"]}) > 1}
    flags = [x for k, v in differ.items() for x in (axes.AXIS[k].flag if k in axes.AXIS else f"--{k}", v)]
    qs = first["grid"]["q_len"]
    q = 4 if 4 in qs else max(qs)  # a run of draft passes measures q 1 only (h100-fa3-draft-kv4096)
    r = cli("select", "--policy", f, "--batch-size", 16, "--q-len", q, "--kv-len", 4096, *flags, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["kernel"] == lookup(pol, 16, q, 4096, **differ)["kernel"]
    r = cli("export", f, "--out", tmp_path / "sel.py")
    assert r.exit_code == 0 and (tmp_path / "sel.py").exists(), r.output


def test_neighbours_bracket_the_q_values_measured_at_that_batch_and_kv():
    # an adaptive sweep measured q 13 at bs 64 only: at bs 16 the q 13 query's neighbours are q 9 and q 16 there
    # (before, the grid's 13 bracketed alone and q 9's different kernel went unseen: "neighbours agree")
    from kbench.report.nearest import locate

    def cell(bs, q, kernel):
        return {"batch_size": bs, "q_len": q, "kv_len": 4096, "kernel": kernel, "path": "x"}

    cells = [cell(16, 1, "xqa"), cell(16, 9, "fa2"), cell(16, 16, "xqa"), cell(64, 13, "fa2")]
    grid = {"batch_size": [16, 64], "q_len": [1, 9, 13, 16], "kv_len": [4096]}
    got = locate(grid, cells, 16, 13, 4096)
    assert got["used"] == {"batch_size": 16, "kv_len": 4096, "q_len": 16}
    assert [(n["q_len"], n["kernel"]) for n in got["neighbours"]] == [(9, "fa2"), (16, "xqa")]
    assert got["neighbours_agree"] is False
    # a measured point still has no neighbours; a point between two measured q values brackets them
    assert locate(grid, cells, 16, 9, 4096)["neighbours"] == []
    assert [n["q_len"] for n in locate(grid, cells, 16, 5, 4096)["neighbours"]] == [1, 9]


def test_select_takes_a_policy_file_its_report_folder_or_the_run_folder(tmp_path):
    # as export and recommend do (one reader: report.policy.policy_from); the three give one answer
    from report_synth import cli

    run = write_run(tmp_path / "run", split_rows())
    assert cli("report", run, "--out", tmp_path / "rep", "--plot-groups", 0).exit_code == 0
    answers = []
    for src in (tmp_path / "rep" / "policy.json", tmp_path / "rep", run):
        r = cli("select", "--policy", src, "--batch-size", 2, "--q-len", 5, "--kv-len", 2048, "--json")
        assert r.exit_code == 0, (src, r.output)
        answers.append(json.loads(r.output)["kernel"])
    assert len(set(answers)) == 1
    r = cli("select", "--policy", tmp_path / "nothing", "--batch-size", 2, "--q-len", 5, "--kv-len", 2048)
    assert r.exit_code == 2 and r.output.strip().endswith(f"{tmp_path / 'nothing'}: no such run folder")
