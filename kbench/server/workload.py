"""The batches a server-bench run sent, as the attention steps the server ran on them: RUN/workload.jsonl, the
workload file `kbench recommend --workload` reads (format: schemas/workload.schema.json).

A case (batch_size requests, input_len prompt tokens, output_len generated tokens each) is, after its prefill,
``steps`` decoding steps of one verify (and, speculating, one draft extend) over the whole batch:
steps = ceil((output_len - 1) / acc_length), acc_length the tokens a step produced on average (1 without
speculative decoding). Each step's query is q_len tokens per request: SGLang's speculative_num_draft_tokens (from
/server_info), else 1 + the mean draft length vLLM's counters saw, else 1 (plain decode, verify step only). The
KV grows from input_len to input_len + output_len over the steps: the file spreads the steps over up to
SEGMENTS lines, each at its segment's mean KV (kv_len includes the step's q_len tokens) and weighted by its
number of steps, so a line's weight x its attention time sums to one batch's attention time.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from kbench.runs.atomic import write_text
from kbench.runs.store import JOURNAL, now_iso, read_journal
from kbench.server.rows import ROW_KIND

WORKLOAD_FILE = "workload.jsonl"
SEGMENTS = 4


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _draft_tokens(info: dict, row: dict) -> tuple[int, str]:
    """(q_len of a speculative step, where it came from)."""
    n = info.get("speculative_num_draft_tokens")
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n, "server info speculative_num_draft_tokens"
    drafts, tokens = _num(row.get("spec_drafts")), _num(row.get("spec_draft_tokens"))
    if drafts and tokens:
        return 1 + round(tokens / drafts), "1 + draft tokens per draft (the server's counters)"
    return 1, "no speculative decoding seen: one token per step"


def case_lines(row: dict, info: dict) -> list[dict]:
    """The workload lines of one ok row (a journal record)."""
    q, q_from = _draft_tokens(info, row)
    acc = _num(row.get("acc_length")) or 1.0
    acc = max(acc, 1.0)
    bs, input_len, output_len = int(row["batch_size"]), int(row["input_len"]), int(row["output_len"])
    gen = max(output_len - 1, 1)  # tokens after the first (the prefill makes the first)
    steps = max(1, math.ceil(gen / acc))
    segs = min(SEGMENTS, steps)
    lines = []
    for s in range(segs):
        lo, hi = s * steps // segs, (s + 1) * steps // segs  # steps [lo, hi)
        made = (lo + hi) / 2 * acc  # tokens generated before the segment's middle step
        kv = input_len + 1 + round(min(made, gen)) + q
        lines.append({"batch_size": bs, "q_len": q, "kv_len": kv, "weight": hi - lo,
                      "steps": ["verify", "draft_extend"] if q > 1 else ["verify"], "case": str(row["case_id"]),
                      "note": f"steps {lo}..{hi - 1} of {steps} (acc_length {acc:.2f}); q_len: {q_from}"})
    return lines


def write_workload(run_dir: str | Path, info: dict, backend: str = "", model: str = "") -> Path | None:
    """RUN/workload.jsonl from the ok rows of the run's journal (a resumed run's earlier cases too); None when
    no case ran."""
    rows = read_journal(Path(run_dir) / JOURNAL, ROW_KIND)
    ok = [r for r in rows.to_dict("records") if r.get("status") == "ok"] if len(rows) else []
    if not ok:
        return None
    header = {"kbench_workload": 1, "source": "kbench server-bench", "run": Path(run_dir).name,
              "backend": backend, "model": model, "created_at": now_iso(),
              "steps": "decoding steps after each case's prefill; weight = steps of one batch of the case"}
    lines = [header] + [x for r in ok for x in case_lines(r, info or {})]
    path = Path(run_dir) / WORKLOAD_FILE
    write_text(path, "".join(json.dumps(x) + "\n" for x in lines))
    return path
