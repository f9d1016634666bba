"""One measured shape. A Case is pure data: the inputs builder and the kernels read it.

Its fields are the axes of `kbench.axes.AXES`, in table order (so ``Case(16, 4, 4096, 32, 8, 128)`` still
reads batch_size, q_len, kv_len, heads); the dataclass is made from the table, the methods live here.
"""
from __future__ import annotations

from dataclasses import asdict, field, fields, make_dataclass

from kbench import axes


class _CaseMethods:
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
        return axes.case_id(self)

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


def _field(a: axes.Axis):
    return (a.name, a.type) if a.required else (a.name, a.type, field(default=a.default))


Case = make_dataclass("Case", [_field(a) for a in axes.AXES], bases=(_CaseMethods,), frozen=True)
Case.__module__ = __name__  # pickles as kbench.case.Case (the isolated and per-device workers unpickle it)
Case.__doc__ = "One measured shape: a value per axis of kbench.axes.AXES (kv_len includes the q_len new tokens)."
