"""Named attention head configurations (per tensor-parallel rank, as the kernel sees them)."""
from __future__ import annotations

from dataclasses import dataclass

from kbench.errors import BadInput


@dataclass(frozen=True)
class HeadConfig:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def group(self) -> int:
        return self.num_qo_heads // self.num_kv_heads

    def label(self) -> str:
        return f"{self.num_qo_heads}/{self.num_kv_heads}x{self.head_dim}"


def parse_heads(text: str) -> HeadConfig:
    """`--heads 32/8/128` (q heads / kv heads / head_dim; 32x8x128 too), for sweep and select."""
    parts = text.replace("x", "/").split("/")
    if len(parts) != 3 or not all(p.strip().isdecimal() for p in parts):
        raise BadInput(f"--heads {text!r}: expected QO/KV/DIM, e.g. 32/8/128")
    return HeadConfig(*(int(p) for p in parts))


MODELS: dict[str, HeadConfig] = {
    "llama3-8b": HeadConfig(32, 8, 128),  # GQA 4
    "llama3-70b-tp8": HeadConfig(8, 1, 128),  # 64/8 heads split over 8 ranks: GQA 8
    "llama3.2-1b": HeadConfig(32, 8, 64),  # GQA 4, head_dim 64
    "qwen3-30b-a3b": HeadConfig(32, 4, 128),  # GQA 8
    "qwen2.5-7b": HeadConfig(28, 4, 128),  # GQA 7
    "gqa8-d64": HeadConfig(16, 2, 64),  # synthetic: GQA 8 at head_dim 64
    "gemma2-9b": HeadConfig(16, 8, 256),  # GQA 2, head_dim 256
    # gpt-oss-20b/120b: GQA 8 at head_dim 64; sliding window 128 on alternating layers, learned sinks on all
    "gpt-oss": HeadConfig(64, 8, 64),
}
