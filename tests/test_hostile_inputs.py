"""Hostile input, property-based: scenario files, CLI axes, result folders, policy files and baselines.

Whatever is thrown at the real `kbench` CLI: exit 0 when the input happens to be valid, 2 (with exactly one
`error:` line) when it is not, never a crash (exit 1 with a traceback); files that were there before are
byte-identical after.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kbench.cli.main import cli
from kbench.errors import BadInput
from report_synth import flip_back_rows, write_run

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                      HealthCheck.too_slow, HealthCheck.filter_too_much])
TINY = ["--page-size", "16", "--budget", "0.02", "--spread-target", "0.5"]


# ---- helpers ---------------------------------------------------------------------------------------------
def fresh(tmp_path: Path) -> Path:
    """A new folder per hypothesis example (tmp_path is shared by all examples of one test)."""
    import tempfile

    return Path(tempfile.mkdtemp(dir=tmp_path))


def tree_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(root).rglob("*")) if p.is_file()}


def invoke(args, allowed=(0, 2)):
    r = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "200"})
    crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
    assert not crashed, f"{args}: {type(r.exception).__name__}: {r.exception}\n{r.output}"
    assert "Traceback" not in r.output, r.output
    assert r.exit_code in allowed, (args, r.exit_code, r.output)
    if r.exit_code == 2:
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, r.output)
    return r


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_doc(d: dict) -> str:
    top = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    tables = [f"[{json.dumps(k)}]\n" + "\n".join(f"{json.dumps(a)} = {toml_value(b)}" for a, b in v.items())
              for k, v in d.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n" + "\n\n".join(tables) + "\n"


text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8)
scalars = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-3, 70), st.floats(), st.booleans(), text,
                    st.sampled_from(["1..4", "1..99999999999*2", "16", "bf16", "HND", "fp8", "all", "reference",
                                     "llama3-8b", "1..16:0", "-1..3", "2,1,2", ""]))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                   st.dictionaries(st.sampled_from(["start", "stop", "step",
                                                                                    "factor", "x"]), c, max_size=3)),
                      max_leaves=6)
SECTIONS = {None: ["name", "description", "model", "kernels", "heads", "grid", "timing", "bogus"],
            "grid": ["batch_size", "q_len", "kv_len", "page_size", "kv_layout", "dtype", "kv_dtype", "bogus"],
            "timing": ["spread_target", "budget_s", "min_samples", "max_samples", "l2", "warmup_ms", "min_time_s", "duty",
                       "settle_ms", "bogus"],
            "heads": ["num_qo_heads", "num_kv_heads", "head_dim", "bogus"]}


def base_scenario() -> dict:
    return {"name": "hostile", "model": "llama3-8b", "kernels": ["reference"],
            "grid": {"batch_size": 1, "q_len": 1, "kv_len": 16, "page_size": 16},
            "timing": {"spread_target": 0.5, "budget_s": 0.02, "min_samples": 3, "max_samples": 5}}


mutation = st.tuples(st.sampled_from(list(SECTIONS)), st.data())


def expected_code(path: Path) -> int | None:
    """0 when kbench's own loader takes the file and the sweep is tiny, 2 when it refuses; None: too big
    to run here (valid but not a unit-test sweep)."""
    from kbench.cases.scenario import load_scenario

    try:
        sc = load_scenario(str(path))
    except BadInput:
        return 2
    cases = sc.cases()
    small = len(cases) <= 4 and max(c.min_bytes() for c in cases) < 8 << 20 and sc.timing.budget_s <= 0.1 \
        and sc.timing.max_samples <= 50 and set(sc.kernels) <= {"reference", "all"}
    return 0 if small else None


# ---- scenario files ---------------------------------------------------------------------------------------
@settings(max_examples=40, **SETTINGS)
@given(muts=st.lists(st.tuples(st.sampled_from(list(SECTIONS)), st.integers(0, 7), values,
                               st.booleans()), min_size=1, max_size=3))
def test_mutated_scenario_files(tmp_path, muts):
    tmp_path = fresh(tmp_path)
    d = base_scenario()
    for section, i, v, delete in muts:
        keys = SECTIONS[section]
        key = keys[i % len(keys)]
        target = d if section is None else d.setdefault(section, {}) if isinstance(d.get(section, {}), dict) else None
        if target is None:
            continue
        if delete:
            target.pop(key, None)
        else:
            target[key] = v
    f = tmp_path / "s.toml"
    f.write_text(toml_doc(d), encoding="utf-8")
    want = expected_code(f)
    assume(want is not None)
    out = tmp_path / "out"
    before = tree_hash(tmp_path)
    r = invoke(["sweep", "--scenario", f, "--out", out], allowed=(want,))
    if want == 2:
        assert not out.exists() and tree_hash(tmp_path) == before
    else:
        assert tree_hash(tmp_path).items() >= before.items()


@settings(max_examples=30, **SETTINGS)
@given(data=st.one_of(st.binary(max_size=200),
                      st.tuples(st.integers(0, 200), st.binary(min_size=1, max_size=8)).map(
                          lambda t: (lambda s: s[:t[0]] + t[1] + s[t[0]:])(toml_doc(base_scenario()).encode()))))
def test_garbage_bytes_scenario_files(tmp_path, data):
    tmp_path = fresh(tmp_path)
    f = tmp_path / "g.toml"
    f.write_bytes(data)
    want = expected_code(f)
    assume(want is not None)
    out = tmp_path / "out"
    invoke(["sweep", "--scenario", f, "--out", out], allowed=(want,))
    if want == 2:
        assert not out.exists() and f.read_bytes() == data


def test_deeply_nested_and_huge_scenarios_are_one_line(tmp_path):
    cases = {
        "deep": "model='llama3-8b'\n[grid]\nbatch_size=" + "[" * 5000 + "1" + "]" * 5000 + "\nq_len=1\nkv_len=16\n",
        "heads": "kernels=['reference']\nheads={num_qo_heads=9223372036854775807,num_kv_heads=1,head_dim=128}\n"
                 "[grid]\nbatch_size=1\nq_len=1\nkv_len=16\n",
        "bs": "model='llama3-8b'\n[grid]\nbatch_size='1..99999999999*2'\nq_len=1\nkv_len=16\n",
        "kv": "model='llama3-8b'\n[grid]\nbatch_size=1\nq_len=1\nkv_len=99999999999999999\n",
        "range": "model='llama3-8b'\n[grid]\nbatch_size='1..9223372036854775807'\nq_len=1\nkv_len=16\n",
        "nokernels": "model='llama3-8b'\nkernels=[]\n[grid]\nbatch_size=1\nq_len=1\nkv_len=16\n",
        "budget_inf": "model='llama3-8b'\n[grid]\nbatch_size=1\nq_len=1\nkv_len=16\n[timing]\nbudget_s=inf\n",
        "warmup_nan": "model='llama3-8b'\n[grid]\nbatch_size=1\nq_len=1\nkv_len=16\n[timing]\nwarmup_ms=nan\n",
        "settle_negative": "model='llama3-8b'\n[grid]\nbatch_size=1\nq_len=1\nkv_len=16\n[timing]\nsettle_ms=-1\n",
    }
    for name, body in cases.items():
        f = tmp_path / f"{name}.toml"
        f.write_text(body)
        invoke(["sweep", "--scenario", f, "--out", tmp_path / "out"], allowed=(2,))
    assert not (tmp_path / "out").exists()


# ---- CLI axes ---------------------------------------------------------------------------------------------
AXIS_TEXT = st.one_of(st.text(alphabet="0123456789,.*:-/ x=²٣ab", max_size=14),
                      st.sampled_from(["1..16", "512..32768*2", "1..3*1", "0", "-1", "1..0", "99999999999999999999",
                                       "1,,2", "..", "1..10000000:1", "32/8/128", "32/0/128", "0/1", "1/0", "²/3",
                                       "1/1", "reference=2", "reference=²", "=3", "all", ",,,", "nope"]))
NEVER = "no-such-kernel"  # ends every sweep at validation: the axis is parsed and checked, nothing runs


@settings(max_examples=40, **SETTINGS)
@given(opt=st.sampled_from(["--batch-size", "--q-len", "--kv-len", "--heads", "--page-size", "--kv-layout",
                            "--dtype", "--kv-dtype", "--model"]), value=AXIS_TEXT)
def test_axis_options_are_parsed_or_refused(tmp_path, opt, value):
    tmp_path = fresh(tmp_path)
    r = invoke(["sweep", opt, value, "--kernels", NEVER, "--out", tmp_path / "o", *TINY], allowed=(2,))
    assert not (tmp_path / "o").exists()
    assert opt in r.output or NEVER in r.output or "grid" in r.output or "heads" in r.output, r.output


@settings(max_examples=25, **SETTINGS)
@given(opt=st.sampled_from(["--kernels", "--shard", "--slow-kernel", "--devices"]), value=AXIS_TEXT)
def test_run_options_on_a_tiny_grid(tmp_path, opt, value):
    tmp_path = fresh(tmp_path)
    from kbench.engine.shards import parse_devices

    if opt == "--devices":
        try:
            parse_devices(value)
            assume(False)  # valid: would start worker processes (covered by tests/test_shards.py)
        except BadInput:
            pass
    if opt == "--slow-kernel":
        assume(not re.fullmatch(r"\s*reference\s*=\s*\d+\s*", value))  # valid: a real (slowed) measurement
    kernels = [] if opt == "--kernels" else ["--kernels", "reference"]
    out = tmp_path / "o"
    r = invoke(["sweep", "-b", "1", "-q", "1", "-k", "16", *kernels, opt, value, "--out", out, *TINY])
    if r.exit_code == 2:
        assert not out.exists()


# ---- result folders ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("good") / "good-run", flip_back_rows(bss=(1,), kvs=(1024,), qs=range(1, 5)))


def _truncate(p: Path, frac: float):
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * frac)])


CORRUPTIONS = st.one_of(
    st.tuples(st.just("truncate"), st.sampled_from(["rows.jsonl", "rows.parquet", "rows.csv", "manifest.json"]),
              st.floats(0, 0.99)),
    st.tuples(st.just("middle_line"), st.integers(0, 20), st.one_of(st.binary(max_size=30),
                                                                    st.sampled_from([b"[1]", b"{}", b"null",
                                                                                     b'{"case_id": [1]}']))),
    st.tuples(st.just("manifest_key"), st.sampled_from(["schema_version", "kind", "device", "shard", "scenario",
                                                        "status", "start_time", "timer"]),
              st.one_of(st.none(), st.integers(), text, st.lists(st.integers(), max_size=2),
                        st.dictionaries(text, st.integers(), max_size=2))),
    st.tuples(st.just("delete"), st.sampled_from(["manifest.json", "rows.jsonl", "rows.parquet", "rows.csv",
                                                  "jsonl+parquet", "all rows"]), st.none()),
    st.tuples(st.just("row_field"), st.sampled_from(["kernel", "case_id", "status", "batch_size", "median_us",
                                                     "samples_us"]),
              st.one_of(st.none(), st.integers(), text, st.lists(st.integers(), max_size=2))),
)


def corrupt(run: Path, how) -> None:
    kind, a, b = how
    if kind in ("truncate", "delete") and a in ("rows.jsonl", "rows.parquet", "rows.csv", "manifest.json") \
            and not (run / a).exists():
        return
    if kind == "truncate":
        _truncate(run / a, b)
    elif kind == "middle_line":
        lines = (run / "rows.jsonl").read_bytes().split(b"\n")
        lines[a % max(len(lines) - 2, 1)] = b
        (run / "rows.jsonl").write_bytes(b"\n".join(lines))
    elif kind == "manifest_key":
        m = json.loads((run / "manifest.json").read_text())
        m[a] = b
        (run / "manifest.json").write_text(json.dumps(m))
    elif kind == "delete":
        names = {"jsonl+parquet": ["rows.jsonl", "rows.parquet"],
                 "all rows": ["rows.jsonl", "rows.parquet", "rows.csv"]}.get(a, [a])
        for n in names:
            (run / n).unlink(missing_ok=True)
    elif kind == "row_field":
        lines = (run / "rows.jsonl").read_text().splitlines()
        rec = json.loads(lines[1])
        rec[a] = b
        lines[1] = json.dumps(rec)
        (run / "rows.jsonl").write_text("\n".join(lines) + "\n")


@settings(max_examples=40, **SETTINGS)
@given(how=CORRUPTIONS, cmd=st.sampled_from(["report", "gate-base", "gate-cand", "baseline", "merge"]))
def test_corrupted_result_folders(tmp_path, good_run, how, cmd):
    tmp_path = fresh(tmp_path)
    run = tmp_path / "bad-run"
    shutil.copytree(good_run, run)
    corrupt(run, how)
    before = tree_hash(run)
    args = {"report": ["report", run, "--out", tmp_path / "rep"],
            "gate-base": ["gate", "--baseline", run, "--candidate", good_run],
            "gate-cand": ["gate", "--baseline", good_run, "--candidate", run],
            "baseline": ["baseline", run, "--name", "b", "--root", tmp_path / "bl"],
            "merge": ["merge", run, good_run, "--out", tmp_path / "m"]}[cmd]
    invoke(args, allowed=(0, 1, 2) if cmd.startswith("gate") else (0, 2))
    assert tree_hash(run) == before  # reading a run never changes it


@settings(max_examples=25, **SETTINGS)
@given(how=CORRUPTIONS)
def test_corrupted_baseline_folders(tmp_path, good_run, how):
    tmp_path = fresh(tmp_path)
    r = invoke(["baseline", good_run, "--name", "main", "--root", tmp_path / "bl"], allowed=(0,))
    base = tmp_path / "bl" / "main"
    if how[0] in ("middle_line", "row_field"):  # a baseline has no journal: hit its Parquet instead
        how = ("truncate", "rows.parquet", 0.5)
    corrupt(base, how)
    before = tree_hash(tmp_path / "bl")
    invoke(["gate", "--baseline", base, "--candidate", good_run], allowed=(0, 1, 2))
    assert tree_hash(tmp_path / "bl") == before


# ---- policy files -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy_text(good_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("pol")
    invoke(["report", good_run, "--out", out], allowed=(0,))
    return (out / "policy.json").read_text()


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=40, **SETTINGS)
@given(data=st.data(), value=st.one_of(st.none(), st.integers(-2, 2**40), st.floats(), text, st.booleans(),
                                       st.lists(st.integers(-1, 3), max_size=3), st.just({}), st.just([])),
       mode=st.sampled_from(["set", "delete", "truncate", "bytes"]),
       q=st.tuples(st.integers(1, 64), st.integers(1, 20), st.integers(1, 1 << 20)))
def test_mutated_policy_files(tmp_path, policy_text, data, value, mode, q):
    tmp_path = fresh(tmp_path)
    pol = json.loads(policy_text)
    f = tmp_path / "policy.json"
    if mode in ("set", "delete"):
        paths = [p for p in _paths(pol) if p]
        path = data.draw(st.sampled_from(paths))
        parent = pol
        for k in path[:-1]:
            parent = parent[k]
        if mode == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        f.write_text(json.dumps(pol))
    elif mode == "truncate":
        f.write_text(policy_text[: data.draw(st.integers(0, len(policy_text) - 1))])
    else:
        f.write_bytes(data.draw(st.binary(max_size=60)))
    before = f.read_bytes()
    invoke(["select", "--policy", f, "--batch-size", q[0], "--q-len", q[1], "--kv-len", q[2], "--extrapolate"])
    invoke(["select", "--policy", f, "--batch-size", q[0], "--q-len", q[1], "--kv-len", q[2], "--heads", "32/8/128"])
    assert f.read_bytes() == before


# ---- a real process: one line on stderr, no traceback ------------------------------------------------------
def test_real_process_hostile_inputs_one_line(tmp_path):
    (tmp_path / "deep.toml").write_text("model='x'\ngrid=" + "[" * 3000 + "]" * 3000 + "\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text('{"schema_version": 1, "kind": "sweep", "shard": 3}')
    (bad / "rows.jsonl").write_text('{"case_id": "a"}\n{oops\n{"case_id": "b"}\n')
    before = tree_hash(bad)
    for args in (["sweep", "--scenario", str(tmp_path / "deep.toml"), "--out", str(tmp_path / "o")],
                 ["sweep", "--resume", str(bad)],
                 ["sweep", "--shard", "²/3", "--kernels", "reference", "--out", str(tmp_path / "o")]):
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", *args], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout
        assert len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error: "), p.stderr
        assert p.stdout.strip() == ""
    assert tree_hash(bad) == before and not (tmp_path / "o").exists()
