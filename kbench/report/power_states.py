"""The two timing states side by side (issue #16): per case, the winner when unthrottled and when sustained,
and every decision that flips between them with its margin.

margin_unthrottled_pct: how much slower (in the unthrottled state) the sustained state's pick is than the
unthrottled winner; margin_sustained_pct: the same the other way round. Both are > 0 for a flip.
tie_unthrottled / tie_sustained: the two picks tie in that state (their spreads overlap: kbench.runs.winners'
tie rule, the one the report and the gate use), so the flip is within the noise there. untimed: the kernels
of the flip that have no time in the other state (a sweep cut short mid-case, a failed row), so its margin
is unknown. A flip with none of these is a real change of the answer; the flip list shows those first and
labels the others.
"""
from __future__ import annotations

import pandas as pd

from kbench.cases import axes
from kbench.errors import BadInput
from kbench.timing.states import states_of
from kbench.runs.rows import CASE_COLUMNS
from kbench.runs.winners import WINNER_INPUT, case_winners, measured

STATES = axes.POWER_STATES
KEY = [c for c in CASE_COLUMNS if c != "power"]
PAIR_COLUMNS = [*KEY, "winner_unthrottled", "unthrottled_us", "winner_sustained", "sustained_us", "flipped",
                "margin_unthrottled_pct", "margin_sustained_pct", "tie_unthrottled", "tie_sustained", "untimed"]


def of_state(rows: pd.DataFrame, state: str) -> pd.DataFrame:
    """The rows of one timing state; BadInput when there are none."""
    vals = axes.AXIS["power"].parse(state, "--power", "report")
    if len(vals) != 1:
        raise BadInput(f"report: --power: give one state ({', '.join(STATES)}), got {state!r}")
    have = states_of(rows)
    if vals[0] not in have:
        raise BadInput(f"report: --power {vals[0]}: the runs hold no {vals[0]} rows (they have: {', '.join(have)})")
    return rows[rows["power"] == vals[0]] if "power" in rows.columns else rows


def side_by_side(rows: pd.DataFrame, cases: pd.DataFrame | None = None) -> pd.DataFrame:
    """One line per case measured in both states (empty when the rows hold one state). cases: case_winners(rows),
    where the caller has them: each state's winners are then its lines (a case is measured in one state; rows
    whose case id stands for both are judged per state as without them)."""
    if len(states_of(rows)) < 2:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    cols = [*KEY, "winner", "winner_us", "tied_with"]
    if cases is not None and "power" in cases.columns and _one_state_per_case(rows):
        w = {s: cases.loc[cases["power"] == s, cols] for s in STATES}
    else:
        need = [c for c in dict.fromkeys([*WINNER_INPUT, "power"]) if c in rows.columns]  # what case_winners reads
        w = {s: case_winners(rows.loc[rows["power"] == s, need])[cols] for s in STATES}
    # the cases of both states, in the unthrottled state's order (merge keeps the left keys' order)
    both = w["unthrottled"].merge(w["sustained"], on=KEY, how="inner", suffixes=("_u", "_s"))
    got = {c: both[c].tolist() for c in both.columns}
    ku, ks = [str(v) for v in got["winner_u"]], [str(v) for v in got["winner_s"]]
    us_u, us_s = [float(v) for v in got["winner_us_u"]], [float(v) for v in got["winner_us_s"]]
    flips = [i for i in range(len(both)) if ku[i] != ks[i]]
    keys = {i: tuple(got[c][i] for c in KEY) for i in flips}
    times = _times(rows, list(keys.values()))
    n = len(both)
    mu, ms, tie_u, tie_s, untimed = [None] * n, [None] * n, [False] * n, [False] * n, [""] * n
    for i in flips:  # a flip: each state's pick timed in the other state, if it was
        tu = times.get(keys[i] + ("unthrottled", ks[i]))  # the sustained pick, timed unthrottled
        ts = times.get(keys[i] + ("sustained", ku[i]))  # the unthrottled pick, timed sustained
        mu[i] = (tu - us_u[i]) / us_u[i] * 100 if tu else None
        ms[i] = (ts - us_s[i]) / us_s[i] * 100 if ts else None
        untimed[i] = "; ".join(f"{k} not timed when {st}" for k, st, t in ((ks[i], "unthrottled", mu[i]),
                                                                           (ku[i], "sustained", ms[i])) if t is None)
        tie_u[i], tie_s[i] = _ties(got["tied_with_u"][i], ks[i]), _ties(got["tied_with_s"][i], ku[i])
    df = pd.DataFrame({**{c: got[c] for c in KEY}, "winner_unthrottled": ku, "unthrottled_us": us_u,
                       "winner_sustained": ks, "sustained_us": us_s, "flipped": [a != b for a, b in zip(ku, ks)],
                       "margin_unthrottled_pct": mu, "margin_sustained_pct": ms, "tie_unthrottled": tie_u,
                       "tie_sustained": tie_s, "untimed": untimed}, columns=PAIR_COLUMNS)
    return df.sort_values(["batch_size", "kv_len", "q_len"], kind="stable").reset_index(drop=True)


def _times(rows: pd.DataFrame, keys: list[tuple]) -> dict:
    """(KEY values..., power, kernel) -> median_us of the measured rows of these cases (KEY values; a dict of every
    row's 30-column key took half a second at 300,000 rows, and only the flips need one)."""
    if not keys:
        return {}
    ok = measured(rows, [*KEY, "power", "kernel"])
    shape = [KEY.index(c) for c in ("batch_size", "q_len", "kv_len")]
    wanted = {tuple(k[i] for i in shape) for k in keys}  # the rows of these shapes: a superset, found cheaply
    near = [t in wanted for t in zip(*(ok[c].tolist() for c in ("batch_size", "q_len", "kv_len")))]
    return ok[near].set_index([*KEY, "power", "kernel"])["median_us"].to_dict()


def _one_state_per_case(rows: pd.DataFrame) -> bool:
    """Every case id's measured rows are of one timing state (as kbench writes them: the state is in the id)."""
    return measured(rows, ["case_id", "power"]).drop_duplicates(["case_id", "power"])["case_id"].is_unique


def _ties(tied_with, kernel: str) -> bool:
    """`kernel` is among the kernels case_winners found tied with a winner (its `tied_with` list)."""
    return kernel in [t.strip() for t in str(tied_with or "").split(",")]


def _not_a_real_flip(f: pd.DataFrame) -> pd.Series:
    """Not a real flip: a tie in a state, or a margin unknown (a kernel of the flip untimed in a state)."""
    return f["tie_unthrottled"].astype(bool) | f["tie_sustained"].astype(bool) | (f["untimed"].fillna("") != "")


def flips(pairs: pd.DataFrame, real_only: bool = False) -> pd.DataFrame:
    """The decisions that flip between the states (real_only: not a tie in either state, both margins known)."""
    f = pairs[pairs["flipped"].astype(bool)]
    if real_only:
        f = f[~_not_a_real_flip(f)]
    return f.reset_index(drop=True)


def _ordered_flips(pairs: pd.DataFrame):
    """(flip row, the states in which its two kernels tie): the real flips first, then the ties."""
    f = flips(pairs)
    noisy = _not_a_real_flip(f)
    for r in pd.concat([f[~noisy], f[noisy]]).itertuples():
        yield r, [s for s in STATES if getattr(r, f"tie_{s}")]


def _notes(r, ties: list[str]) -> str:
    """Why a flip is not a real one ('' for a real flip): the states where it is a tie, the kernels untimed."""
    parts = ([f"a tie when {' and when '.join(ties)}"] if ties else []) + ([r.untimed] if r.untimed else [])
    return "; ".join(parts)


def _pct(v, missing: str) -> str:
    return missing if v is None or pd.isna(v) else f"+{v:.1f}%"


def flip_lines(pairs: pd.DataFrame) -> list[str]:
    """'bs 64 q 6 kv 4096: unthrottled fa2-prefill (trtllm-decode +3.5%), sustained trtllm-decode (fa2-prefill +11.6%)',
    the real flips first, then those within the spread in a state, labelled '[a tie when unthrottled]'."""
    pct = lambda v: _pct(v, "n/a")  # noqa: E731
    out = []
    for r, ties in _ordered_flips(pairs):
        notes = _notes(r, ties)
        label = f" [{notes}]" if notes else ""
        out.append(f"bs {r.batch_size} q {r.q_len} kv {r.kv_len} {axes.group_label(r._asdict())}: unthrottled "
                   f"{r.winner_unthrottled} ({r.winner_sustained} {pct(r.margin_unthrottled_pct)}), sustained "
                   f"{r.winner_sustained} ({r.winner_unthrottled} {pct(r.margin_sustained_pct)}){label}")
    return out


def flip_table(pairs: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The flipped decisions as a report table (real flips first, ties labelled), for report.md/html."""
    pct = lambda v: _pct(v, "-")  # noqa: E731
    headers = ["group", "batch", "q_len", "kv_len", "unthrottled winner", "its rival's margin", "sustained winner",
               "its rival's margin", "verdict"]
    rows = []
    for r, ties in _ordered_flips(pairs):
        rows.append([axes.group_label(r._asdict()), str(r.batch_size), str(r.q_len), str(r.kv_len),
                     str(r.winner_unthrottled), pct(r.margin_unthrottled_pct), str(r.winner_sustained),
                     pct(r.margin_sustained_pct), _notes(r, ties) or "flips"])
    return headers, rows


def power_blocks(pairs: pd.DataFrame | None, power: str | None) -> list[tuple]:
    """report.md/html: the two timing states' answers, and every decision that flips between them."""
    if pairs is None or pairs.empty:
        return []
    f = flips(pairs)
    real = len(flips(pairs, real_only=True))
    blocks: list[tuple] = [
        ("h", 2, "Timing states: unthrottled vs sustained"),
        ("p", f"{len(pairs)} cases were measured in both states (unthrottled: duty-cycled, off the power cap; "
              f"sustained: back to back after a pre-load, at the power cap). {len(f)} decision(s) flip between "
              f"them, {real} beyond the spread in both states; power.csv has the two answers side by side."
              + (f" This report and its policy are for the {power} state." if power else
                 " The policy has one group per state (select --power STATE).")),
    ]
    if len(f):
        blocks.append(("table", *flip_table(pairs)))
    return blocks
