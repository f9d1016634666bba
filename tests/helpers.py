"""Small helpers shared by the CLI tests of several feature files (outputs, resume, signals, help, baselines...):
run a kbench command in-process, read its one error line, snapshot a folder, the committed baseline."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kbench.cases.models import MODELS
from kbench.cases.scenario import Scenario, Timing
from kbench.cli.main import cli
from kbench.engine.sweep import SweepObserver

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "results" / "baselines" / "h200-draft-extend-kv4096"
from committed import COMMITTED_BASELINES  # noqa: E402,F401  (the committed baselines, by name)
TINY = ["-b", "1", "-q", "1,2", "-k", "64", "--budget", "0.02"]


def run_cli(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


def server_bench_cli(*args, env=None):
    """`kbench server-bench ARGS` in-process (exceptions caught: the result says what happened)."""
    return CliRunner().invoke(cli, ["server-bench", *map(str, args)], env=env)


def one_error_line(r, code=2):
    assert r.exit_code == code, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.output, r.output
    return lines[0]


def tree(p: Path) -> dict:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def flashinfer_kernels() -> int:
    """Kernels in "all" other than the reference: each is one skipped row per case on a CPU."""
    from kbench.kernels.registry import select

    return len([k for k in select(["all"]) if k.name != "reference"])


FAST = Timing(spread_target=0.2, budget_s=0.05, min_samples=3, max_samples=10)


def tiny(**kw):
    """A small CPU scenario (4 cases of gqa8-d64), quick to time; keywords replace its fields."""
    base = dict(name="tiny", heads=MODELS["gqa8-d64"], batch_size=[1, 2], q_len=[1, 4], kv_len=[64],
                page_size=[16], timing=FAST)
    base.update(kw)
    return Scenario(**base).validate()


class StopAfter(SweepObserver):
    """Ctrl-C after the n-th row, as a user stopping a sweep."""

    def __init__(self, n):
        self.n, self.seen = n, 0

    def row(self, row):
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt


def shared_library(payload: bytes = b"") -> bytes:
    """A module a prebuild archive may hold: a real shared library of this machine (the smallest extension module
    of this Python's own lib-dynload, which kbench.engine.aot_archive takes: class, byte order, ELF version, OS
    ABI, ET_DYN, machine, whole), then ``payload`` (bytes after its end, which no loader reads: modules that
    differ)."""
    from elf_samples import real_library

    return real_library() + payload


def worst_error_vs_reference(kernel: str, case, copies: int = 2, expect=None) -> float:
    """prepare() on inputs of `copies` copies; each copy's output (the rows the reference checks) compared with that
    copy's float32 reference at the tolerance the sweep uses; the worst relative error. expect(inputs, i, out):
    a test's own assertions on each output."""
    from kbench.kernels.inputs import build_inputs
    from kbench.kernels.reference import reference_attention
    from kbench.kernels.registry import get_kernel
    from kbench.timing.check import compare, tolerance_for

    k = get_kernel(kernel)
    inputs = build_inputs(case, copies=copies)
    fn = k.prepare(inputs)
    worst = 0.0
    for i in reversed(range(copies)):
        out = k.checked_output(inputs, fn(i))
        if expect is not None:
            expect(inputs, i, out)
        chk = compare(out, reference_attention(inputs, i),
                      tolerance_for(case.dtype, case.kv_dtype, case.skip_softmax, case.q_dtype))
        assert chk.ok, f"{kernel} copy {i}: {chk.describe()}"
        worst = max(worst, chk.rel_err)
    return worst


def ancestors(parents, i) -> set[int]:
    """i and its ancestors in a draft tree's parent list (-1: a root), walking up the list: no matrices, so the tree
    tests stay independent of kbench.kernels.tree_masks."""
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out
