"""Where along q_len the decode kernel wins, per (batch_size, kv_len, head config, dtype, page, layout).

The winner flips back and forth along q_len (the decode kernel steps up when q_len x GQA group crosses 32,
fa2 when it crosses 16), so the answer is a list of ranges, not one threshold. Each measured q_len gets the
case's ``path_verdict`` (decode | context | tie | decode-only | context-only, see kbench.runs.winners); runs of
consecutive measured q_len with the same verdict form one segment ``(q_lo, q_hi, verdict)``.

Two counts per line. ``switches``: how often the path the policy serves changes along q_len. The policy serves
each case's winner (the faster median, also in a tie), so this is what an engine routing by the policy does,
and what ``kbench select`` answers. ``flips``: the changes that are beyond the measured spread (ties and
one-path points skipped); a line of ties whose faster median alternates between a decode and a context
kernel has many switches and no flip (the H200 baseline at bs 64: decode-wrapper and fa2-prefill, one FA2 kernel).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from kbench.report.runs import GROUP_COLUMNS, group_label
from kbench.runs.winners import CONTEXT, CONTEXT_ONLY, DECODE, DECODE_ONLY, TIE


@dataclass
class Crossover:
    group: str  # group_label(): heads, dtype, page size, layout
    batch_size: int
    kv_len: int
    group_size: int  # num_qo_heads / num_kv_heads, so q_len x group can be read off
    segments: list[tuple[int, int, str]] = field(default_factory=list)
    served: list[tuple[int, str]] = field(default_factory=list)  # (q_len, the policy's path there), sorted by q_len

    def ranges(self, *verdicts: str) -> list[tuple[int, int]]:
        return [(lo, hi) for lo, hi, v in self.segments if v in verdicts]

    @property
    def flips(self) -> int:
        """How often the served path changes along q_len (ties and one-path points do not count)."""
        seq = [DECODE if v in (DECODE, DECODE_ONLY) else CONTEXT for _, _, v in self.segments
               if v in (DECODE, CONTEXT, DECODE_ONLY, CONTEXT_ONLY)]
        return sum(a != b for a, b in zip(seq, seq[1:]))

    @property
    def switches(self) -> int:
        """How often the path the policy serves (each case's winner, ties included) changes along q_len."""
        paths = [p for _, p in self.served]
        return sum(a != b for a, b in zip(paths, paths[1:]))


def segments(q_verdicts: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """Run-length encode (q_len, verdict) pairs sorted by q_len."""
    out: list[list] = []
    for q, v in sorted(q_verdicts):
        if out and out[-1][2] == v:
            out[-1][1] = q
        else:
            out.append([q, q, v])
    return [tuple(s) for s in out]


def crossovers(cases: pd.DataFrame) -> list[Crossover]:
    """cases: case_winners() output. One Crossover per (group, batch_size, kv_len), sorted."""
    out = []
    if cases.empty:
        return out
    keys = GROUP_COLUMNS + ["batch_size", "kv_len"]
    for key, g in cases.groupby(keys, sort=True):
        rec = dict(zip(keys, key))
        out.append(Crossover(group_label(rec), int(rec["batch_size"]), int(rec["kv_len"]),
                             int(rec["num_qo_heads"]) // max(1, int(rec["num_kv_heads"])),
                             segments([(int(q), v) for q, v in zip(g["q_len"], g["path_verdict"])]),
                             sorted((int(q), str(p)) for q, p in zip(g["q_len"], g["winner_path"]))))
    return out


def fmt_ranges(rs: list[tuple[int, int]]) -> str:
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in rs) or "-"


def table(xs: list[Crossover]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the crossover table (shared by the screen, markdown and HTML)."""
    headers = ["group", "batch", "kv_len", "decode wins q", "context wins q", "tie q", "one path only q",
               "policy switches", "flips beyond ties"]
    rows = [[x.group, str(x.batch_size), str(x.kv_len), fmt_ranges(x.ranges(DECODE)),
             fmt_ranges(x.ranges(CONTEXT)), fmt_ranges(x.ranges(TIE)),
             ", ".join(f"{fmt_ranges([(lo, hi)])} ({v})" for lo, hi, v in x.segments
                       if v in (DECODE_ONLY, CONTEXT_ONLY)) or "-", str(x.switches), str(x.flips)] for x in xs]
    return headers, rows
