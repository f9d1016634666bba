"""The typed loader of a server-bench run's server info (SGLang's /server_info as the run's manifest keeps it,
kbench.server.backends.SGLANG_INFO_KEYS), what `kbench recommend --current RUN` reads back as what the server ran.

    info = typed(manifest.get("server"), "--current RUN")   # {"page_size": 64, "disable_overlap_schedule": False, ...}

A manifest is a file anyone can edit: each field kbench reads has one type and a range, and anything else is one
line (exit 2) naming the field and what it holds, never a traceback nor a guess:
- integers (page_size, the speculative counts, max_running_requests, tp/dp size): a JSON integer (or a float
  that is one, 64.0) in 1..2**31-1 (0 allowed where SGLang allows it); text (`"sixty-four"`), a list, an object,
  NaN, infinity, a bool: refused;
- booleans (disable_overlap_schedule, use_mla_backend): true/false, or the text "true"/"false" (any case) and
  0/1 that SGLang's own dumps have held; `"false"` is false (Python's bool("false") is True);
- text (backends, algorithm, model path, version): a string of at most TEXT_MAX characters without control
  characters;
- architectures: a list of at most 16 such strings.
Fields kbench does not read are not looked at (their size and depth are the manifest reader's: kbench.files).
"""
from __future__ import annotations

import math

from kbench import text as _text
from kbench.errors import BadInput

INT_FIELDS = {"page_size": 1, "speculative_eagle_topk": 1, "speculative_num_steps": 1,
              "speculative_num_draft_tokens": 1, "max_running_requests": 1, "tp_size": 1, "dp_size": 1,
              "cuda_graph_max_bs": 0}  # name -> smallest value
BOOL_FIELDS = ("disable_overlap_schedule", "use_mla_backend")
TEXT_FIELDS = ("model_path", "tokenizer_path", "version", "speculative_algorithm", "attention_backend",
               "prefill_attention_backend", "decode_attention_backend", "speculative_draft_attention_backend",
               "speculative_attention_mode", "kv_cache_dtype")
LIST_FIELDS = ("architectures",)
TEXT_MAX = 4096
INT_MAX = 2**31 - 1


def _what(v) -> str:
    """What a value is, in words, short whatever its size."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else ("infinity" if v > 0 else "-infinity") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v) if abs(v) < 10**12 else f"an integer of {len(str(abs(v)))} digits"
    if isinstance(v, str):
        s = _text.one_line(v[:40])
        return repr(s + ("..." if len(v) > 40 else "")) + (f" ({len(v):,} characters)" if len(v) > 40 else "")
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if isinstance(v, dict):
        return f"an object of {len(v)} keys"
    return type(v).__name__


def typed(info, label: str) -> dict:
    """The fields kbench reads of ``info``, each of its one type (module docstring); BadInput (`LABEL: its server
    info's FIELD is ..., not ...`) for any other. None: {} (a run without server info)."""
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise BadInput(f"{label}: its server info is {_what(info)}, not an object of SGLang's server arguments")

    def bad(k, v, want) -> BadInput:
        return BadInput(f"{label}: its server info's {k} is {_what(v)}, not {want} (the manifest was edited, or "
                        "the server is not SGLang)")

    out: dict = {}
    for k, lo in INT_FIELDS.items():
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= INT_MAX:
            raise bad(k, v, f"an integer in {lo}..{INT_MAX:,}")
        out[k] = v
    for k in BOOL_FIELDS:
        v = info.get(k)
        if v is None:
            continue
        if isinstance(v, str) and v.strip().lower() in ("true", "false"):
            v = v.strip().lower() == "true"
        elif isinstance(v, int) and not isinstance(v, bool) and v in (0, 1):
            v = bool(v)
        if not isinstance(v, bool):
            raise bad(k, v, "true or false")
        out[k] = v
    for k in TEXT_FIELDS:
        v = info.get(k)
        if v is None:
            continue
        if not isinstance(v, str) or len(v) > TEXT_MAX or _text.terminal(v) != v or "\n" in v or "\t" in v:
            raise bad(k, v, f"text of at most {TEXT_MAX:,} characters without control characters")
        out[k] = v
    for k in LIST_FIELDS:
        v = info.get(k)
        if v is None:
            continue
        if not isinstance(v, list) or len(v) > 16 or not all(
                isinstance(x, str) and len(x) <= TEXT_MAX and _text.terminal(x) == x for x in v):
            raise bad(k, v, "a list of at most 16 architecture names")
        out[k] = v
    return out
