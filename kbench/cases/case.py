"""One measured shape. A Case is pure data: the inputs builder and the kernels read it.

Its fields are the axes of `kbench.cases.axes.AXES`, in table order (so ``Case(16, 4, 4096, 32, 8, 128)`` still
reads batch_size, q_len, kv_len, heads); the dataclass is made from the table, the methods live here.
"""
from __future__ import annotations

import math
from dataclasses import asdict, field, fields, make_dataclass

from functools import lru_cache

from kbench.cases import axes, mla


@lru_cache(maxsize=256)
def _lengths(kv_dist, q_dist, bs, kv_len, q_len, seed):
    from kbench.cases.dists import batch_lengths

    return batch_lengths(kv_dist, q_dist, bs, kv_len, q_len, seed, where="case")


class _CaseMethods:
    @property
    def group(self) -> int:
        return self.num_qo_heads // self.num_kv_heads

    @property
    def pages_per_request(self) -> int:
        return -(-self.kv_len // self.page_size)

    @property
    def case_id(self) -> str:
        return axes.case_id(self)

    def kv_elem_bytes(self) -> int:
        return 1 if self.kv_dtype == "fp8" else 2

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def kv_values_per_token(self) -> int:
        """Cache values per token: K and V of every KV head; MLA: one latent row serving as both (576)."""
        return mla.kv_values_per_token(self) if self.is_mla else self.num_kv_heads * self.head_dim * 2

    @property
    def v_head_dim(self) -> int:
        """Width of a query head's output: head_dim; MLA: kv_lora_rank (512), the query being 576 wide."""
        return self.kv_lora_rank if self.is_mla else self.head_dim

    @property
    def softmax_scale(self) -> float:
        """1/sqrt(head_dim); MLA: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), the model's own scale."""
        return mla.softmax_scale(self) if self.is_mla else 1.0 / math.sqrt(self.head_dim)

    def lengths(self, seed: int = 0):
        """This case's per-request lengths (kbench.cases.dists.BatchLengths), drawn once per seed."""
        return _lengths(self.kv_dist, self.q_dist, self.batch_size, self.kv_len, self.q_len, seed)

    @property
    def realistic(self) -> bool:
        """Whether any realistic-batch axis (issue #13) is off its default (the idealised batch)."""
        return any(getattr(self, a.name) != a.default for a in axes.axes_with(axes.REALISTIC))

    def max_seq_len_value(self, longest: int) -> int:
        """The max_seq_len a decode kernel gets for a batch whose longest sequence is `longest`."""
        if self.max_seq_len == "tight":
            return longest
        return max(longest, int(self.max_seq_len.partition(":")[2]))

    def kv_tokens_read(self, seed: int = 0) -> int:
        """KV tokens a kernel must read: every request's own length, clipped to what its window can see."""
        if not self.realistic:
            return self.batch_size * self.kv_len
        b = self.lengths(seed)
        if self.window_left < 0:
            return b.total_kv
        # the earliest query of a request sees keys from (kv - q) - window_left on
        return sum(min(k, self.window_left + q) for k, q in zip(b.kv, b.q))

    def kv_bytes(self, seed: int = 0) -> int:
        """Bytes of K and V a kernel must read: the floor of its memory traffic (the real total)."""
        return self.kv_tokens_read(seed) * self.kv_values_per_token * self.kv_elem_bytes()

    def qo_bytes(self, seed: int = 0) -> int:
        """The query read (1 byte an element in fp8) and the output written (the case's dtype)."""
        tokens = self.batch_size * self.q_len if self.q_dist == "fixed" else self.lengths(seed).total_q
        return (1 if self.q_dtype == "fp8" else 2) * tokens * self.num_qo_heads * self.head_dim + \
            2 * tokens * self.num_qo_heads * self.v_head_dim

    def min_bytes(self, seed: int = 0) -> int:
        return self.kv_bytes(seed) + self.qo_bytes(seed)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def _field(a: axes.Axis):
    return (a.name, a.type) if a.required else (a.name, a.type, field(default=a.default))


Case = make_dataclass("Case", [_field(a) for a in axes.AXES], bases=(_CaseMethods,), frozen=True)
Case.__module__ = __name__  # pickles as kbench.cases.case.Case (the isolated and per-device workers unpickle it)
Case.__doc__ = "One measured shape: a value per axis of kbench.cases.axes.AXES (kv_len includes the q_len new tokens)."
