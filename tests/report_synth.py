"""Synthetic sweep runs with known answers for the report tests (rows made up, written by RunWriter)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from kbench.cases.case import Case
from kbench.runs.rows import Row
from kbench.runs.store import RunWriter

H200 = {"name": "NVIDIA H200", "sm": 90}
DECODE, WRAPPER, FA2, FMHA = "trtllm-decode", "decode-wrapper", "fa2-prefill", "trtllm-fmha-v2"
PATHS = {DECODE: "decode", WRAPPER: "decode", FA2: "context", FMHA: "context"}
COPY_BW = 4300.0


def case(bs, q, kv, heads=(32, 8, 128), **kw) -> Case:
    return Case(batch_size=bs, q_len=q, kv_len=kv, num_qo_heads=heads[0], num_kv_heads=heads[1],
                head_dim=heads[2], **kw)


def row(kernel, c: Case, median, rel=0.01, status="ok", path=None, reason="") -> Row:
    """A timed row with rel_spread `rel` (CI half-width = median * rel) and p25/p75 at +-2 rel."""
    timed = median is not None and status == "ok"
    bw = c.kv_bytes() / (median * 1e-6) / 1e9 if timed else None
    return Row.for_case(kernel, path or PATHS.get(kernel, "decode"), "synthetic", c, status, reason=reason,
                        median_us=median if timed else None, rel_spread=rel if timed else None,
                        p25_us=median * (1 - 2 * rel) if timed else None,
                        p75_us=median * (1 + 2 * rel) if timed else None,
                        iqr_us=median * 4 * rel if timed else None, num_samples=50 if timed else 0,
                        kv_bytes=c.kv_bytes(), kv_bandwidth_gbs=bw, roofline_frac=bw / COPY_BW if bw else None,
                        device=H200["name"], sm=H200["sm"])


def write_run(path: Path, rows, reference=True, **manifest) -> Path:
    m = {"kind": "sweep", "device": dict(H200), "copy_bandwidth_gbs": COPY_BW, "command": "synthetic", **manifest}
    w = RunWriter(path, m)
    seen = set()
    for r in rows:
        w.append(r)
        if reference and r.case_id not in seen:
            seen.add(r.case_id)
            w.append(Row.for_case("reference", "reference", "torch", Case(**{k: getattr(r, k) for k in
                                   Case.field_names()}), "ok", median_us=0.001))  # never a candidate
    return w.finalize()


def flip_back_rows(bss=(1, 8), kvs=(1024, 4096), qs=range(1, 17)):
    """Decode wins q 1-3, loses q 4-8, wins q 9-16, at every (bs, kv): three ranges."""
    rows = []
    for bs in bss:
        for kv in kvs:
            for q in qs:
                c = case(bs, q, kv)
                rows.append(row(DECODE, c, 20.0 if 4 <= q <= 8 else 10.0))
                rows.append(row(FA2, c, 15.0))
    return rows


def demo_rows(seed=0):
    """A plausible H200-like sweep: decode steps 1.7x each time q x G crosses a multiple of 32, fa2 costs
    one 64-row tile per 64 rows of q x G, so the winner flips back along q for GQA 8. decode-wrapper is wrong
    at small batch (the shared-workspace story), fmha-v2 is slow, one kernel name carries markup."""
    rng = np.random.default_rng(seed)
    rows = []
    for heads in ((32, 8, 128), (8, 1, 128)):
        g = heads[0] // heads[1]
        for bs in (1, 4, 16, 64):
            for kv in (512, 2048, 8192, 32768):
                for q in range(1, 17):
                    c = case(bs, q, kv, heads)
                    mem = c.kv_bytes() / 4.2e9 * 1e6 / 1e3  # us at ~4.2 TB/s
                    t_dec = 4.0 + mem * (1 + 0.7 * ((q * g - 1) // 32)) * (1 + 0.01 * q)
                    t_fa2 = 6.0 + mem * 1.45 * -(-q * g // 64) * (1 + 0.01 * q)
                    noise = lambda: float(1 + rng.normal(0, 0.01))  # noqa: E731
                    rows.append(row(DECODE, c, t_dec * noise(), rel=0.01))
                    rows.append(row(FA2, c, t_fa2 * noise(), rel=0.01))
                    rows.append(row(FMHA, c, t_dec * 2.5 * noise(), rel=0.02))
                    if bs <= 4:
                        rows.append(row(WRAPPER, c, t_dec * 0.7, status="wrong",
                                        reason="rel_err 3.1 > 0.02 <script>alert(1)</script>"))
                    else:
                        rows.append(row(WRAPPER, c, t_dec * 1.15 * noise(), rel=0.01))
    return rows


def cli(*args):
    """Invoke the real `kbench` group (so BadInput -> 'error: ...', exit 2 is what users get)."""
    from kbench.cli.main import cli as group
    return CliRunner().invoke(group, [str(a) for a in args], env={"COLUMNS": "250"})
