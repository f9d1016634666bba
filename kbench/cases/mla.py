"""Latent attention (MLA: DeepSeek-V3/R1, Kimi K2) as a case: its geometry, which axes mean something for it,
and the bytes a kernel must move.

Absorbed MLA, as engines run it for decode, draft extend and target verify: the query is q_nope (kv_lora_rank
values per head, W_UK already absorbed) followed by q_pe (qk_rope_head_dim values); the cache holds one shared
latent head per token, ckv (kv_lora_rank values) followed by kpe (qk_rope_head_dim values): 512 + 64 = 576 for
DeepSeek-V3 and Kimi K2. scores = q_nope.ckv + q_pe.kpe, scaled by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)
(the softmax scale of the model before absorption: 1/sqrt(192)); output = softmax . ckv (kv_lora_rank values,
W_UV is applied after attention).

In the case model an MLA case has attention "mla", one KV head (num_kv_heads 1) and head_dim = kv_lora_rank +
qk_rope_head_dim, the width of the query and of a cache row as kernels see them. Imports only core and the axis
table below it.
"""
from __future__ import annotations

import math
from typing import Mapping

from kbench.cases import axes
from kbench.values import ascii_digits
from kbench.errors import BadInput

# the [heads] table of an MLA scenario: the kind, the q heads per rank and the three widths
HEAD_KEYS = ("attention", "num_qo_heads", *axes.names(axes.MLA))
SHAPE_FIELDS = tuple(axes.names(axes.MLA))  # kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim

# grid axes that mean nothing for MLA's kernels and the value each must keep, with why (one line each)
REFUSED: dict[str, tuple[object, str]] = {
    "kv_layout": ("HND", "MLA's latent cache has one layout, [pages, page, kv_lora_rank + qk_rope_head_dim] "
                         "(no head axis to order): drop kv_layout"),
    "tree": ("chain", "no MLA kernel here takes a draft-tree mask (FlashMLA and FlashInfer's MLA wrapper mask "
                      "causally only, trtllm_batch_decode_with_kv_cache_mla has no mask): drop tree"),
    "window_left": (-1, "no MLA kernel here takes a sliding window (DeepSeek-V3 and Kimi K2 attend to the "
                        "whole context): drop window_left"),
    "sinks": ("off", "no MLA model here has attention sinks, and FlashInfer's fa2/fa3 MLA refuse them "
                     "(flashinfer/mla/_batch_mla/_backends/_fa_common.py:1040): drop sinks"),
    "skip_softmax": ("off", "skip-softmax is a trtllm-gen option; no MLA kernel kbench runs on SM90 takes it "
                            "(fa2/fa3 MLA refuse it, _fa_common.py:1042): drop skip_softmax"),
}


def kv_values_per_token(case) -> int:
    """Values one token adds to the cache: one latent row, which serves as both K (with kpe) and V (ckv)."""
    return case.kv_lora_rank + case.qk_rope_head_dim


def softmax_scale(case) -> float:
    """1/sqrt(qk_nope_head_dim + qk_rope_head_dim): the model's query/key head width before absorption."""
    return 1.0 / math.sqrt(case.qk_nope_head_dim + case.qk_rope_head_dim)


def heads_text(g: Mapping) -> str:
    """The --heads spelling of an MLA group: 'mla:128/512/64/128' (q heads / kv_lora_rank / rope / nope)."""
    return "mla:" + "/".join(str(int(g[n])) for n in ("num_qo_heads", *SHAPE_FIELDS))


def parse_heads_text(body: str, whole: str) -> dict:
    """'128/512/64/128' (after 'mla:') -> the head fields of an MLA case."""
    parts = body.replace("x", "/").split("/")
    if len(parts) != 4 or not all(ascii_digits(p) for p in parts):
        raise BadInput(f"--heads {whole!r}: expected mla:QO/KV_LORA_RANK/ROPE/NOPE, e.g. mla:128/512/64/128")
    return geometry(*(int(p) for p in parts))


def geometry(num_qo_heads: int, kv_lora_rank: int, qk_rope_head_dim: int, qk_nope_head_dim: int) -> dict:
    """Every head field of an MLA case: one KV head, head_dim the query/cache row width."""
    return {"attention": "mla", "num_qo_heads": num_qo_heads, "num_kv_heads": 1,
            "head_dim": kv_lora_rank + qk_rope_head_dim, "kv_lora_rank": kv_lora_rank,
            "qk_rope_head_dim": qk_rope_head_dim, "qk_nope_head_dim": qk_nope_head_dim}


def heads_from_table(table: Mapping, where: str) -> dict:
    """An MLA scenario's [heads] table (attention = "mla", num_qo_heads, kv_lora_rank, qk_rope_head_dim,
    qk_nope_head_dim) -> the head fields; GQA keys in it are refused with one line."""
    gqa = [k for k in ("num_kv_heads", "head_dim") if k in table]
    if gqa:
        raise BadInput(f"{where}: heads.{gqa[0]}: not an MLA field (MLA has one latent KV head and head_dim = "
                       f"kv_lora_rank + qk_rope_head_dim); give {', '.join(HEAD_KEYS[1:])}")
    unknown = set(table) - set(HEAD_KEYS)
    if unknown:
        raise BadInput(f"{where}: heads: unknown key {sorted(unknown)[0]!r} (an MLA table takes "
                       f"{', '.join(HEAD_KEYS)})")
    missing = [k for k in HEAD_KEYS if k not in table]
    if missing:
        raise BadInput(f"{where}: heads: missing {missing[0]!r} (an MLA table takes {', '.join(HEAD_KEYS)})")
    vals = {}
    for k in HEAD_KEYS[1:]:
        v = table[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise BadInput(f"{where}: heads.{k}: expected an integer, got {v!r}")
        vals[k] = v
    return geometry(vals["num_qo_heads"], *(vals[k] for k in SHAPE_FIELDS))


def check_gqa_table(table: Mapping, where: str) -> None:
    """A GQA [heads] table that names an MLA field: one line saying how to ask for MLA."""
    for k in SHAPE_FIELDS:
        if k in table:
            raise BadInput(f"{where}: heads.{k}: an MLA field on a GQA head config; set attention = \"mla\" "
                           f"(with num_qo_heads, {', '.join(SHAPE_FIELDS)}) or use an MLA model, e.g. deepseek-v3")


def validate_heads(h, where: str) -> None:
    """An MLA head config: positive q heads and latent rank, rope + nope > 0, one KV head of rank + rope values."""
    for name in ("num_qo_heads", "kv_lora_rank"):
        v = getattr(h, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(f"{where}: heads.{name}: expected a positive integer, got {v!r}")
    for name in ("qk_rope_head_dim", "qk_nope_head_dim"):
        v = getattr(h, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise BadInput(f"{where}: heads.{name}: expected an integer >= 0, got {v!r}")
    for name in HEAD_KEYS[1:]:  # each field's own axis rules, the int32 bound too (as a GQA table's)
        axes.AXIS[name].validate([getattr(h, name)], f"heads.{name}", where)
    if h.qk_rope_head_dim + h.qk_nope_head_dim < 1:
        raise BadInput(f"{where}: heads: qk_rope_head_dim + qk_nope_head_dim must be > 0 (the softmax scale is "
                       "1/sqrt of their sum)")
    if h.num_kv_heads != 1 or h.head_dim != h.kv_lora_rank + h.qk_rope_head_dim:
        raise BadInput(f"{where}: heads: MLA has one KV head of kv_lora_rank + qk_rope_head_dim = "
                       f"{h.kv_lora_rank + h.qk_rope_head_dim} values, got {h.num_kv_heads} x {h.head_dim}")


def validate_gqa_heads(h, where: str) -> None:
    """A GQA head config carries no MLA field (they are 0)."""
    for name in SHAPE_FIELDS:
        if getattr(h, name):
            raise BadInput(f"{where}: heads.{name}: {getattr(h, name)} on a GQA head config; set attention = "
                           "\"mla\" or use an MLA model")


def check_grid(grid: Mapping[str, list | None], where: str) -> None:
    """An MLA scenario's grid: every axis that means nothing for MLA must keep its default (one line)."""
    for name, (keep, why) in REFUSED.items():
        vals = grid.get(name)
        if vals and any(v != keep for v in vals):
            bad = next(v for v in vals if v != keep)
            raise BadInput(f"{where}: grid.{name}: {bad} on an MLA model: {why}")
