"""What every MLA kernel shares (kbench.cases.mla): the kind it takes, its output and the axes it refuses.

An MLA kernel's query and cache are packed (kbench.kernels.mla_inputs: [rows, Hq, rank + rope] and [pages, page,
rank + rope]); its output is [rows, Hq, kv_lora_rank] (the latent; W_UV comes after attention), poisoned with NaN
so that a row the kernel leaves unwritten fails the check.
"""
from __future__ import annotations

from kbench.cases import mla
from kbench.kernels.base import Kernel, Launch
from kbench.kernels.inputs import Inputs


class MlaKernel(Kernel):
    attentions = ("mla",)
    kv_dtypes = ("bf16", "fp16", "fp8")

    def launch(self, inputs: Inputs, padded: bool = False, workspace: bool = True) -> Launch:
        """Kernel.launch with MLA's output: [rows of the (padded) query, Hq, kv_lora_rank] in the case's dtype."""
        import torch

        from kbench.kernels.inputs import torch_dtype

        c = inputs.case
        q = inputs.q_padded() if padded else inputs.q
        out = torch.full((q.shape[0], c.num_qo_heads, c.kv_lora_rank), float("nan"), dtype=torch_dtype(c.dtype),
                         device=q.device)
        return Launch(inputs, self._workspace(inputs.device) if workspace else None, out, padded)


def refused_axis(case) -> str | None:
    """An axis kbench.cases.mla refuses for MLA (a scenario never lets one through; a Python caller may)."""
    for name, (keep, why) in mla.REFUSED.items():
        if getattr(case, name) != keep:
            return f"{name} {getattr(case, name)}: {why}"
    return None


def geometry_reason(case, name: str, ranks: tuple[int, ...] = (512,), ropes: tuple[int, ...] = (64,)) -> str | None:
    """Kernels built for DeepSeek's widths only (kv_lora_rank 512, rope 64)."""
    if case.kv_lora_rank not in ranks or case.qk_rope_head_dim not in ropes:
        return (f"{name} takes kv_lora_rank {'/'.join(map(str, ranks))} with qk_rope_head_dim "
                f"{'/'.join(map(str, ropes))} (this case: {case.kv_lora_rank} + {case.qk_rope_head_dim})")
    return None
