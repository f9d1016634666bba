"""One measured shape. A Case is pure data: the inputs builder and the kernels read it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

DTYPES = ("bf16", "fp16")
KV_DTYPES = ("bf16", "fp16", "fp8")
LAYOUTS = ("HND", "NHD")
PAGE_SIZES = (16, 32, 64, 128)
HEAD_DIMS = (64, 128, 256)


@dataclass(frozen=True)
class Case:
    batch_size: int
    q_len: int
    kv_len: int  # includes the q_len new tokens, as engines pass seq_lens
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int = 64
    kv_layout: str = "HND"
    dtype: str = "bf16"
    kv_dtype: str = "bf16"

    @property
    def group(self) -> int:
        return self.num_qo_heads // self.num_kv_heads

    @property
    def pages_per_request(self) -> int:
        return -(-self.kv_len // self.page_size)

    @property
    def heads(self) -> str:
        return f"{self.num_qo_heads}/{self.num_kv_heads}x{self.head_dim}"

    @property
    def case_id(self) -> str:
        kv = self.dtype if self.kv_dtype == self.dtype else f"{self.dtype}-kv{self.kv_dtype}"
        return (
            f"bs{self.batch_size}-q{self.q_len}-kv{self.kv_len}-h{self.num_qo_heads}.{self.num_kv_heads}"
            f".{self.head_dim}-p{self.page_size}-{self.kv_layout}-{kv}"
        )

    def kv_elem_bytes(self) -> int:
        return 1 if self.kv_dtype == "fp8" else 2

    def kv_bytes(self) -> int:
        """Bytes of K and V a kernel must read: the floor of its memory traffic."""
        return self.batch_size * self.kv_len * self.num_kv_heads * self.head_dim * 2 * self.kv_elem_bytes()

    def qo_bytes(self) -> int:
        return 2 * self.batch_size * self.q_len * self.num_qo_heads * self.head_dim * 2

    def min_bytes(self) -> int:
        return self.kv_bytes() + self.qo_bytes()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
