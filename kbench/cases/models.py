"""Named attention head configurations (per tensor-parallel rank, as the kernel sees them)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from kbench.cases import axes, mla
from kbench.errors import BadInput
from kbench.values import ascii_digits


@dataclass(frozen=True)
class HeadConfig:
    """The head axes of kbench.cases.axes (role HEADS). GQA: the first three; MLA (latent attention): one KV head,
    head_dim = kv_lora_rank + qk_rope_head_dim, and MLA's shape fields (see kbench.cases.mla)."""
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    attention: str = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0

    @classmethod
    def mla(cls, num_qo_heads: int, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64,
            qk_nope_head_dim: int = 128) -> "HeadConfig":
        """An MLA head config (DeepSeek-V3's widths by default): q heads per rank and the latent widths."""
        return cls(**mla.geometry(num_qo_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim))

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def group(self) -> int:
        return self.num_qo_heads // self.num_kv_heads

    def text(self) -> str:
        """The --heads spelling: '32/8/128', or 'mla:128/512/64/128' for MLA."""
        return heads_text(asdict(self))

    def case_fields(self) -> dict:
        """Every head axis of a Case (kbench.cases.axes, role HEADS) with this config's value."""
        return {n: getattr(self, n) for n in axes.HEAD_AXES}

    def table(self) -> dict:
        """The [heads] table a scenario file (or a manifest) holds for this config."""
        if self.is_mla:
            return {k: getattr(self, k) for k in mla.HEAD_KEYS}
        return {"num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}


# what heads_text reads of a group or row: the attention kind and the head axes (MLA's too)
HEAD_FIELDS = ("attention", "num_qo_heads", "num_kv_heads", "head_dim", *mla.SHAPE_FIELDS)


def heads_text(g) -> str:
    """The --heads spelling of a group or row (a mapping of the head axes; one without attention is GQA)."""
    if g.get("attention", "gqa") == "mla":
        return mla.heads_text(g)
    return f"{int(g['num_qo_heads'])}/{int(g['num_kv_heads'])}/{int(g['head_dim'])}"


def parse_heads(text: str) -> HeadConfig:
    """`--heads 32/8/128` (q heads / kv heads / head_dim; 32x8x128 too) or `--heads mla:128/512/64/128` (q heads /
    kv_lora_rank / qk_rope_head_dim / qk_nope_head_dim), for sweep and select."""
    kind, sep, body = text.partition(":")
    if sep:
        if kind.strip().lower() != "mla":
            raise BadInput(f"--heads {text!r}: expected QO/KV/DIM (GQA) or mla:QO/KV_LORA_RANK/ROPE/NOPE")
        return HeadConfig(**mla.parse_heads_text(body, text))
    parts = text.replace("x", "/").split("/")
    if len(parts) != 3 or not all(ascii_digits(p) for p in parts):
        raise BadInput(f"--heads {text!r}: expected QO/KV/DIM, e.g. 32/8/128 (or mla:128/512/64/128 for MLA)")
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
    # MLA (latent attention, kbench.cases.mla): kv_lora_rank 512 + rope 64 cached per token, nope 128 (scale
    # 1/sqrt(192)). DeepSeek-V3/R1 have 128 q heads: all of them on one GPU with DP attention (or TP1), 16 at TP8;
    # Kimi K2 has 64 q heads with the same widths: 64 per GPU, 8 at TP8.
    "deepseek-v3": HeadConfig.mla(128),
    "deepseek-v3-tp8": HeadConfig.mla(16),
    "kimi-k2": HeadConfig.mla(64),
    "kimi-k2-tp8": HeadConfig.mla(8),
}
