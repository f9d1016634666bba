"""Comparing a kernel's output with the reference: relative L2 error, max abs error, a tolerance per dtype."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# relative L2 error allowed; bf16 rounding of the output alone is ~2e-3, kernels add softmax in low precision
TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2}
FP8_KV_TOLERANCE = 6e-2
# an fp8 (e4m3) query with fp8 KV: the reference computes from the same fp8-rounded query and KV, so what is
# left is the kernel's own fp8 arithmetic (the softmax probabilities rounded to e4m3 for P.V: 3 mantissa bits,
# about 2% rms relative error per product, averaged over the keys); 3x that, as for fp8 KV
FP8_Q_TOLERANCE = 6e-2
# skip-softmax (skip_softmax_threshold_scale_factor) drops blocks whose softmax weight is below a threshold:
# an approximation by design, judged against the exact reference by this separate, looser tolerance; its
# cases carry the setting in their id, so they never compete with exact kernels for a winner
SKIP_SOFTMAX_TOLERANCE = 0.1


def tolerance_for(dtype: str, kv_dtype: str, skip_softmax: str = "off", q_dtype: str = "dtype") -> float:
    if skip_softmax != "off":
        return SKIP_SOFTMAX_TOLERANCE
    if q_dtype == "fp8":
        return FP8_Q_TOLERANCE
    return FP8_KV_TOLERANCE if kv_dtype == "fp8" else TOLERANCE[dtype]


@dataclass
class CheckResult:
    rel_err: float
    max_abs_err: float
    tolerance: float
    finite: bool

    @property
    def ok(self) -> bool:
        return self.finite and self.rel_err <= self.tolerance

    def describe(self) -> str:
        if not self.finite:
            return "output has NaN/Inf (unwritten or overflowed elements)"
        return f"rel err {self.rel_err:.3g} > tolerance {self.tolerance:.3g} (max abs err {self.max_abs_err:.3g})"


def compare(out: torch.Tensor, ref: torch.Tensor, tolerance: float) -> CheckResult:
    o = out.float().reshape(ref.shape)
    finite = bool(torch.isfinite(o).all())
    diff = (o - ref).nan_to_num(nan=float("inf"))
    denom = ref.norm().item() or 1.0
    rel = diff.norm().item() / denom
    return CheckResult(rel_err=rel, max_abs_err=diff.abs().max().item(), tolerance=tolerance, finite=finite)
