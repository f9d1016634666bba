"""kbench export --format python: a standard-library-only file whose select/lookup answer exactly what kbench select
answers, on every measured point of the committed baselines and between them, errors included; and the policy's
published JSON Schema, which the policies kbench writes validate against."""
from __future__ import annotations

import ast
import importlib.util
import json
import random
import subprocess
import sys

import jsonschema
import pytest
from recommend_synth import export_cli, known_rows
from report_synth import write_run

from kbench.errors import BadInput
from kbench.recommend.price import load_source
from kbench.report import nearest
from kbench.report.policy import lookup
from kbench.report.policy_schema import policy_schema

BASELINES = ["results/baselines/h200-draft-extend-kv4096", "results/baselines/h200-draft-extend-full-kv512-4096-32768"]
STDLIB = set(sys.stdlib_module_names)


def imports(source: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add((node.module or "").split(".")[0])
    return out


def load_module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module", params=BASELINES, ids=["kv4096", "full-grid"])
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("exp") / "kbench_policy.py"
    res = export_cli(request.param, "--out", out)
    assert res.exit_code == 0, res.output
    return load_source([request.param]).policy, out, load_module(out)


def points(policy):
    """Every measured point, half-way and off-by-one points between measured values, and random ones (in and
    just outside the measured box)."""
    g = policy["groups"][0]
    grid = g["grid"]
    yield from ((c["batch_size"], c["q_len"], c["kv_len"]) for c in g["cells"])
    def between(vals, log):
        out = set()
        for a, b in zip(vals, vals[1:]):
            mid = int((a * b) ** 0.5) if log else (a + b) // 2
            out |= {mid - 1, mid, mid + 1, a + 1, b - 1}
        return sorted(v for v in out if v >= 1)
    for bs in between(grid["batch_size"], True)[:12]:
        for q in between(grid["q_len"], False)[:8]:
            for kv in between(grid["kv_len"], True)[:6]:
                yield bs, q, kv
    rng = random.Random(7)
    lo = {ax: min(v) for ax, v in grid.items()}
    hi = {ax: max(v) for ax, v in grid.items()}
    for _ in range(1500):
        bs = rng.randint(1, 2 * hi["batch_size"])
        q = rng.randint(1, hi["q_len"] + 2)
        kv = rng.randint(max(q, lo["kv_len"] // 2), 2 * hi["kv_len"])
        yield bs, q, kv
    yield 4, 9, 8  # q_len > kv_len: refused by both


def answer(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except (BadInput, ValueError) as e:
        return ("error", str(e))


def test_exported_selector_agrees_with_select_everywhere(exported):
    policy, _, mod = exported
    n = 0
    for bs, q, kv in points(policy):
        for ex in (False, True):
            want = answer(lookup, policy, bs, q, kv, extrapolate=ex)
            got = answer(mod.lookup, bs, q, kv, extrapolate=ex)
            assert got == want, (bs, q, kv, ex)
            if not isinstance(want, tuple):
                assert mod.select(bs, q, kv, extrapolate=ex) == want["kernel"]
            n += 1
    assert n > 3000


def test_exported_file_needs_only_the_standard_library(exported):
    _, path, _ = exported
    assert imports(path.read_text()) <= STDLIB
    assert imports(open(nearest.__file__).read()) == {"math"}  # what export copies verbatim
    # -I -S: no site-packages, no kbench on the path; the file alone answers
    r = subprocess.run([sys.executable, "-I", "-S", str(path), "16", "4", "4096"], capture_output=True, text=True,
                       cwd=path.parent)
    assert r.returncode == 0 and r.stdout.strip() in ("trtllm-decode", "fa2-prefill", "decode-wrapper"), r.stderr
    r = subprocess.run([sys.executable, "-I", "-S", str(path), "4096", "4", "4096"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "outside the measured range" in r.stderr


def test_groups_are_picked_by_filters_as_select_picks_them(tmp_path):
    rows = known_rows() + known_rows(kv_dist="lognormal:1.0") + known_rows(heads=(8, 1, 128))
    run = write_run(tmp_path / "run", rows)
    out = tmp_path / "multi.py"
    assert export_cli(run, "--out", out).exit_code == 0
    mod = load_module(out)
    policy = load_source([run]).policy
    for filters in ({}, {"heads": "8/1/128"}, {"kv_dist": "lognormal:1.0"}, {"kv_dist": "fixed", "heads": "32/8/128"},
                    {"heads": "16/2/64"}, {"kv_dist": "fixed"}):
        want = answer(lookup, policy, 8, 4, 2000, **filters)
        got = answer(mod.lookup, 8, 4, 2000, **filters)
        assert (got == want) if not isinstance(want, tuple) else isinstance(got, tuple), (filters, want, got)
    assert isinstance(answer(mod.lookup, 8, 4, 2000), tuple)  # three groups: filters needed, as in select
    # ... and on its command line: the filters as options, select's exit codes
    def run(*args):
        return subprocess.run([sys.executable, "-I", "-S", str(out), *map(str, args)], capture_output=True, text=True)

    r = run(8, 4, 2000, "--heads", "8/1/128")
    assert r.returncode == 0 and r.stdout.strip() == lookup(policy, 8, 4, 2000, heads="8/1/128")["kernel"], r.stderr
    r = run(8, 4, 2000, "--kv-dist", "lognormal:1.0", "--heads", "32/8/128")
    assert r.returncode == 0 and r.stdout.strip() == lookup(policy, 8, 4, 2000, kv_dist="lognormal:1.0",
                                                            heads="32/8/128")["kernel"], r.stderr
    r = run(8, 4, 2000)
    assert r.returncode == 2 and r.stderr.startswith("error: 3 groups match") and r.stderr.count("\n") == 1
    for bad in (run(8, "x", 2000), run(8, 4, 2000, "--color", "red")):  # argparse's errors as one kbench line
        assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1, bad.stderr
    assert r.stderr.startswith("error: 3 groups match; narrow with --heads/--kv-dist: ")
    r = run("--help")
    assert r.returncode == 0 and "--kv-dist VALUE" in r.stdout and "lognormal:1.0" in r.stdout
    assert "8/1/128" in r.stdout  # the heads the policy has, as --heads takes them
    with pytest.raises(ValueError, match="unknown filter"):
        mod.select(8, 4, 2000, color="red")


def test_export_bad_input(tmp_path):
    r = export_cli(BASELINES[0], "--out", tmp_path / "x.py", "--format", "cpp")
    assert r.exit_code == 2 and "--format 'cpp'" in r.output
    r = export_cli(BASELINES[0], "--out", tmp_path)
    assert r.exit_code == 2
    (tmp_path / "bad.json").write_text("{}")
    r = export_cli(tmp_path / "bad.json", "--out", tmp_path / "y.py")
    assert r.exit_code == 2 and "is not 'kbench.policy/2'" in r.output


def test_no_file_name_becomes_code_in_the_exported_selector(tmp_path):
    """The policy's and the output's names go into the generated docstring: quotes there must not end it (a name
    is the user's, but a policy may come from anyone's repository). What the policy itself holds is refused before
    (tests/test_report_policy.py: a name that does not print, a kernel that is not a kernel name)."""
    payload = 'x"""\nimport pathlib; pathlib.Path("PWNED").write_text("")\n"""'
    src = tmp_path / f"p{payload}.json"
    src.write_text(json.dumps(load_source([BASELINES[0]]).policy))
    out = tmp_path / "sel.py"
    res = export_cli(src, "--out", out)
    assert res.exit_code == 0, res.output
    out2 = tmp_path / 'q""";import pathlib;pathlib.Path("PWNED").write_text("");""".py'
    assert export_cli(src, "--out", out2).exit_code == 0
    for f in (out, out2):
        p = subprocess.run([sys.executable, str(f), "16", "4", "4096"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "trtllm-decode", p.stderr
        assert not (tmp_path / "PWNED").exists()
        assert "pathlib" not in imports(f.read_text())  # the name stayed text in the docstring
    assert repr(str(src)) in load_module(out).__doc__ and out2.stem in load_module(out2).__doc__


# ---- the policy's JSON Schema ------------------------------------------------------------------------------
def test_policy_schema_is_published_and_the_policies_kbench_writes_validate(tmp_path):
    from kbench.report import build_report

    committed = json.loads(open("schemas/policy.schema.json", encoding="utf-8").read())
    assert committed == policy_schema(), "regenerate: python -m kbench.report.publish_schema > schemas/policy.schema.json"
    jsonschema.Draft202012Validator.check_schema(committed)
    v = jsonschema.Draft202012Validator(committed)
    run = write_run(tmp_path / "run", known_rows() + known_rows(q_dist="accept:0.7") + known_rows(power="sustained"))
    res = build_report([run], tmp_path / "rep", holdout=0.3)
    written = [json.loads((res.out_dir / f).read_text()) for f in ("policy.json", "policy-holdout.json")]
    written.append(load_source([BASELINES[0]]).policy)
    for pol in written:
        errors = sorted(v.iter_errors(json.loads(json.dumps(pol))), key=str)
        assert not errors, errors[0].message
    broken = json.loads(json.dumps(written[0]))
    del broken["groups"][0]["cells"]
    assert list(v.iter_errors(broken))
    broken = json.loads(json.dumps(written[0]))
    broken["groups"][0]["cells"][0]["kernels_us"] = {"fa2-prefill": "fast"}
    assert list(v.iter_errors(broken))


def test_an_export_to_a_device_suggests_nothing_to_run(tmp_path):
    # export --out /dev/null said "try: python /dev/null BATCH_SIZE ..."
    run = write_run(tmp_path / "run", known_rows())
    r = export_cli(run, "--out", "/dev/null")
    assert r.exit_code == 0 and "wrote /dev/null:" in r.output and "try: python" not in r.output, r.output
    r = export_cli(run, "--out", tmp_path / "sel.py")
    assert r.exit_code == 0 and f"try: python {tmp_path / 'sel.py'}" in r.output
