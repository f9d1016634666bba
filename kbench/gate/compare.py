"""Match baseline and candidate rows and decide, per row, whether the candidate regressed.

Decision rule (the same text is in ``kbench gate --help``):

- A matched row whose baseline status is ok is compared on each metric. With ``worse`` the relative
  change in the bad direction ((cand - base) / base for times, (base - cand) / base for throughputs)
  and the row's allowed band

      band = max(threshold, k * run_noise, run_spread)
      run_noise = max(median run_spread of the baseline's ok rows of the same kernel and batch size,
                      noise_floor)

  run_spread = (max - min) / median of the row's per-run medians, recorded by ``kbench baseline RUN1
  RUN2 ...`` (kbench.gate.baselines); k = ``run_spread_k``, default 3; noise_floor default 0. A single-run
  baseline has no run_spread, so run_noise = noise_floor and band = max(threshold, k * noise_floor)
  (= threshold by default), with a warning that run-to-run noise is unknown. Then: **regression** iff
  ``worse > band`` AND the difference is beyond within-run noise in that direction (one-sided
  Mann-Whitney p < alpha when both rows kept samples, else the spread intervals do not overlap, else
  the band alone); **improvement** iff ``-worse > band`` and beyond noise the other
  way (listed, passes); beyond the threshold but within the band (method "run-spread") or within the
  within-run noise is **within-noise** (passes); anything else passes.
  Why pooled: 2 or 3 runs estimate one row's run-to-run spread poorly (two runs can land close by
  chance, or far apart once); rows of one kernel and batch size share clock and power behaviour, so
  their median spread, times k, is the row's allowance; the row's own run_spread (k = 1) is a floor:
  a change no larger than what the baseline runs themselves showed for that row never fails.
- A matched ok/ok row whose time (sweep median_us; server latency, TTFT) is absent, NaN, infinite, zero or
  negative on either side, or whose other metric is NaN, infinite, zero or negative, fails as **invalid**: a
  broken measurement never passes as not compared.
- Status: baseline ok -> candidate wrong or failed fails (**wrong** / **failed**); ok -> skipped fails as
  **skipped** unless ``allow_missing`` (the kernel no longer ran). A baseline row that was not ok is not
  compared (**not-compared**, passes; "fixed" when the candidate is ok now).
- A baseline row absent from the candidate fails as **missing** unless ``allow_missing``; candidate rows
  absent from the baseline are listed as **new** (pass).
- Sweep runs: the decode-vs-context winner of a case (kbench.runs.winners.case_winners) changing between
  decode and context fails unless ``ignore_winner_change``; reported separately from rows. A side whose
  best decode and best context times tie (within their within-run spreads, winners.py's path_verdict,
  or within the run-to-run band of each other: |decode - context| / min(decode, context) <=
  max(k * run_noise, run_spread) of either of the two best rows in the baseline) has no winner, so no
  change: such cases are listed as ties (``winner_ties``), not failures. So is a flip whose two gaps (the old
  winner's lead in the baseline plus the new winner's in the candidate) add up to at most twice the pair's own
  run-to-run movement (pair_movement: the 90th percentile of how far the passing kernel rows moved, a common
  shift removed): noise a single-run baseline cannot know, shown by the other rows of the same two runs. And so
  is a flip whose new winner leads by at most the threshold in the candidate: keeping the old choice (what an
  engine's policy picks for that shape) now costs at most the threshold, which is the change the gate counts
  (on six H100 A/A sweeps, single-run baselines, 3 of 15 pairs failed on one such flip, decode and context
  1.6% apart at bs16-q12 and one sweep's decode row 2.1% slower, beyond the pair's movement).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
import math
from pathlib import Path
from statistics import median

import numpy as np
import pandas as pd

from kbench.values import finite, number, parse_float, status, status_value
from kbench.errors import BadInput
from kbench.runs.manifest import GATE, comparable, hardware_of, num_runs
from kbench.runs.store import release_memory
from kbench.gate.loading import RowSamples, load_for_gate, read_samples
from kbench.gate.metrics import Metric, broken, key_columns, measurement, metrics_for, samples_of
from kbench.gate.stats import is_worse
from kbench.gate.power import DEFAULT_POWER, detectable_paired, detectable_spread, detectable_two_sample
from kbench.runs.winners import case_winners

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.01
DEFAULT_RUN_SPREAD_K = 3.0
DEFAULT_NOISE_FLOOR = 0.0


EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}  # 2: bad input (kbench.errors)
HEAD_MAX = 120  # the verdict line's length: one line of a CI log
OUTCOME_ORDER = ["regression", "invalid", "wrong", "failed", "skipped", "missing", "winner-change", "inconclusive",
                 "improvement", "within-noise", "pass", "new", "not-compared"]


def _fit(line: str) -> str:
    return line if len(line) <= HEAD_MAX else line[: HEAD_MAX - 3] + "..."


def _row_brief(r: "RowResult") -> str:
    """``bs1-in64-out16 latency +24.7%, detectable 31%, ~60 rounds`` (a row in a verdict line)."""
    name = (f"{r.case_id} {r.metric}" if r.metric and r.metric != "median_us" else r.case_id)
    if r.kernel and r.kernel not in name:
        name = f"{r.kernel}/{name}"
    bits = [name + (f" {r.change:+.1%}" if r.change is not None else f" {r.outcome}")]
    if r.outcome == "inconclusive":
        bits.append(f"detectable {_pct(r.detectable)}")
        if r.rounds_needed:
            bits.append(f"~{r.rounds_needed} rounds")
    elif r.p_value is not None:
        bits.append(f"p={r.p_value:.2g}")
    return ", ".join(bits)


def _pct(x: float | None) -> str:
    return "unknown" if x is None else ("inf" if math.isinf(x) else f"{x:.1%}")


@dataclass(slots=True)  # slots: a gate of a 300,000-row run holds as many
class RowResult:
    key: dict
    kernel: str
    case_id: str
    metric: str | None
    outcome: str  # pass | within-noise | improvement | inconclusive | regression | invalid | wrong | failed | skipped | missing | new | not-compared
    fails: bool
    base_status: str | None = None
    cand_status: str | None = None
    base_value: float | None = None
    cand_value: float | None = None
    change: float | None = None  # (cand - base) / base
    method: str | None = None  # mann-whitney | spread | threshold-only | run-spread
    p_value: float | None = None
    note: str = ""
    run_noise: float | None = None  # pooled run-to-run noise of the row's kernel and batch size (docstring)
    run_spread: float | None = None  # the row's own run_spread in the baseline
    band: float | None = None  # max(threshold, k * run_noise, run_spread): what a regression must exceed
    detectable: float | None = None  # the smallest change its own noise lets the test see (kbench.gate.power)
    rounds_needed: int | None = None  # an inconclusive row: the rounds (samples per side) that would decide it

    @property
    def name(self) -> str:
        head = f"{self.kernel} / {self.case_id}" if self.kernel else self.case_id
        return f"{head} [{self.metric}]" if self.metric and self.metric != "median_us" else head

    def to_dict(self) -> dict:
        """Its fields (the key a copy), then its name."""
        d = {f: getattr(self, f) for f in _ROW_FIELDS}
        d["key"], d["name"] = dict(self.key), self.name
        return d


_ROW_FIELDS = [f.name for f in fields(RowResult)]


@dataclass
class WinnerChange:
    case_id: str
    base_path: str
    cand_path: str
    base_winner: str | None
    cand_winner: str | None
    base_speedup: float | None  # best context time / best decode time
    cand_speedup: float | None
    fails: bool


@dataclass
class GateResult:
    baseline: str
    candidate: str
    kind: str
    threshold: float
    alpha: float
    rows: list[RowResult]
    winner_changes: list[WinnerChange]
    winners_compared: list[str]  # case ids whose winners were compared
    baseline_hw: str
    candidate_hw: str
    warnings: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    baseline_runs: int = 1
    run_spread_k: float = DEFAULT_RUN_SPREAD_K
    noise_floor: float = DEFAULT_NOISE_FLOOR
    winner_ties: list[str] = field(default_factory=list)  # flips within the run-to-run spread: ties
    paired: dict | None = None  # the two halves of one interleaved server-bench run: its manifest's interleave entry
    noise_used: str = ""  # which noise the rule tested against, in words (the output says it)
    power: float = DEFAULT_POWER  # a PASS needs the rows to detect a change of the band's size this often

    def with_outcome(self, *outcomes: str) -> list[RowResult]:
        return [r for r in self.rows if r.outcome in outcomes]

    @property
    def failing_rows(self) -> list[RowResult]:
        return [r for r in self.rows if r.fails]

    @property
    def compared(self) -> list[RowResult]:
        """Rows where both sides had something to judge (a gate that compared none of them proves nothing)."""
        judged = ("pass", "within-noise", "improvement", "inconclusive", "regression", "wrong", "failed")
        return [r for r in self.rows if r.outcome in judged or r.fails]

    @property
    def inconclusive_rows(self) -> list[RowResult]:
        return [r for r in self.rows if r.outcome == "inconclusive"]

    @property
    def verdict(self) -> str:
        """PASS | FAIL | INCONCLUSIVE: FAIL when anything fails (or nothing was compared), INCONCLUSIVE when a
        compared row could not be decided (its noise hides a change of the band's size), else PASS."""
        if not self.compared or self.failing_rows or any(w.fails for w in self.winner_changes):
            return "FAIL"
        return "INCONCLUSIVE" if self.inconclusive_rows else "PASS"

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        out["winner-change"] = len(self.winner_changes)
        return out

    def _counted(self) -> str:
        c = self.counts()
        return ", ".join(f"{c[k]} {k}" for k in OUTCOME_ORDER if c.get(k))

    def summary_line(self) -> str:
        """The verdict in one CI log line (at most HEAD_MAX characters): PASS, FAIL or INCONCLUSIVE, then what
        decided it (the worst failing row; the worst undecided row, its detectable change and the rounds that
        would decide it; or the largest detectable change that passed). details() says the rest."""
        v = self.verdict
        if not self.compared:
            return _fit("FAIL: nothing compared: no row is ok and timed on both sides")
        n = len(self.compared)
        if v == "FAIL" and self.kind == "server-bench":
            from kbench.gate.ab import ab_answer

            whole = f"FAIL: {ab_answer(self.rows)}"
            if len(whole) <= HEAD_MAX:
                return whole
        if v == "FAIL":
            bad = self.failing_rows
            worst = max(bad, key=lambda r: abs(r.change or 0) if r.outcome == "regression" else -1, default=None)
            wc = sum(w.fails for w in self.winner_changes)
            what = f"{len(bad)} of {n} rows fail" + (f", {wc} winner change(s)" if wc else "")
            if worst is not None:
                what += f"; worst {_row_brief(worst)}"
            return _fit(f"FAIL: {what}")
        if v == "INCONCLUSIVE":
            rows = self.inconclusive_rows
            worst = max(rows, key=lambda r: r.detectable if r.detectable is not None else math.inf)
            return _fit(f"INCONCLUSIVE: {len(rows)} of {n} rows cannot tell {self.threshold:.0%}; "
                        f"{_row_brief(worst)}")
        if self.kind == "server-bench":
            from kbench.gate.ab import ab_answer

            whole = f"PASS: {ab_answer(self.rows)}"
            if len(whole) <= HEAD_MAX:
                return whole
        dets = [r.detectable for r in self.compared if r.detectable is not None]
        better = sum(r.outcome == "improvement" for r in self.rows)
        tail = f", each could see {max(dets):.1%}" if dets else ""
        return _fit(f"PASS: no row worse than {self.threshold:.0%} ({n} rows"
                    + (f", {better} better" if better else "") + f"){tail}")

    def details(self) -> str:
        """The long answer below the verdict line: for server-bench runs the rows read per case (kbench.gate.ab),
        then the outcomes counted."""
        text = ""
        if self.kind == "server-bench" and self.compared:
            from kbench.gate.ab import ab_answer

            text = ab_answer(self.rows) + " "
        return text + "Rows: " + self._counted()

    def to_dict(self, rows: bool = True) -> dict:
        """Every field (rows: each RowResult.to_dict(); rows=False: an empty list), then passed, exit_code, counts
        and the verdict (summary_line)."""
        d = asdict(replace(self, rows=[]))  # asdict of 300,000 rows, copied field by field, took seconds
        d["rows"] = [r.to_dict() for r in self.rows] if rows else []
        d["passed"], d["exit_code"], d["counts"] = self.passed, self.exit_code, self.counts()
        d["verdict"] = self.summary_line()
        d["verdict_word"], d["verdict_details"] = self.verdict, self.details()
        return d


def parse_threshold(text, option: str = "--threshold") -> float:
    """'5%' or '0.05' -> 0.05. A bare number of 1 or more is refused (5 is ambiguous: 5% or 500%?)."""
    s = str(text).strip()
    pct = s.endswith("%")
    try:
        v = parse_float(s[:-1] if pct else s)
    except ValueError:
        raise BadInput(f"{option} {text!r}: expected a percentage like 5% or a fraction like 0.05") from None
    if pct:
        v /= 100
    if not (0 <= v < 1) or v != v:
        hint = f" (did you mean {s}%?)" if not pct and 1 <= v < 100 else ""
        raise BadInput(f"{option} {text!r}: must be between 0% and 100%{hint}")
    return v


@dataclass(frozen=True)
class RunNoise:
    own: float | None  # the row's run_spread, None when the baseline did not record one
    pooled: float  # max(median run_spread of its kernel and batch size, noise_floor)

    def band(self, k: float) -> float:
        """The run-to-run part of the band: max(k * pooled, own)."""
        return max(k * self.pooled, self.own or 0.0)


NO_NOISE = RunNoise(None, 0.0)


def run_noise_of(base_recs: "Records", noise_floor: float = 0.0) -> list[RunNoise | None]:
    """RunNoise of each row of the baseline's records, by its place (None for a row no key counts: the earlier of
    a repeated key): the row's run_spread and the median run_spread of the baseline's ok rows of its kernel and
    batch size (at least noise_floor). Rows without a run_spread (single-run baselines, rows one run measured)
    still get their group's median."""
    spread, state = base_recs.column("run_spread"), base_recs.column("status")
    kernel, bs = base_recs.column("kernel", ""), base_recs.column("batch_size", "")
    groups: dict[tuple, list[float]] = {}
    own: dict[int, float] = {}
    group_of: dict[int, tuple] = {}
    for i in base_recs.index.values():
        g = group_of[i] = (str(kernel[i]), str(bs[i]))
        rs = finite(spread[i])
        if rs is not None and rs >= 0:
            own[i] = rs
            if status_value(state[i]) == "ok":
                groups.setdefault(g, []).append(rs)
    pooled = {g: float(median(v)) for g, v in groups.items()}
    shared: dict[tuple, RunNoise] = {}  # rows without a run_spread of one pooled noise share one (frozen) RunNoise
    out: list[RunNoise | None] = [None] * base_recs.row_count
    for i, g in group_of.items():
        p = max(pooled.get(g, 0.0), noise_floor)
        if i in own:
            out[i] = RunNoise(own[i], p)
        else:
            key = (p, math.copysign(1.0, p))  # 0.0 and -0.0 are equal keys but print apart
            out[i] = shared.get(key) or shared.setdefault(key, RunNoise(None, p))
    return out


# the columns the comparison reads from a row (beside the metrics' columns; the key is the dict's key)
# (at most 10 of them with the samples: a dict of up to 10 keys takes 272 bytes, of 11 464, and a 300,000-row gate
# holds one per row of each run; the baseline's reason is never read)
RECORD_COLUMNS = ("case_id", "kernel", "status", "reason", "batch_size", "run_spread", "rel_spread",
                  "p25_us", "p75_us", "repeats", "sample_rounds")


def _gate_columns() -> frozenset[str]:
    """The columns of a sweep's rows the gate reads (load_for_gate keeps only these): every case axis (the key and
    case_winners' input), the comparison's columns and metrics, and device and sm (hardware_of). Not the samples:
    where these columns are used, a row's samples are read from its file when its noise test needs them."""
    from kbench.cases import axes
    from kbench.gate.metrics import SWEEP_KEY, SWEEP_METRICS
    from kbench.runs.rows import CASE_COLUMNS
    from kbench.runs.winners import WINNER_INPUT

    return frozenset([*(a.name for a in axes.AXES), *CASE_COLUMNS, *SWEEP_KEY, *RECORD_COLUMNS, *WINNER_INPUT,
                      *(m.column for m in SWEEP_METRICS), "path", "device", "sm"])


def _shared(values: list) -> list:
    """values with equal strings made one object (a run's kernel, status and axis values repeat 100,000 times)."""
    seen: dict = {}
    return [seen.setdefault(v, v) if isinstance(v, str) else v for v in values]


def _column_values(col: pd.Series, as_key: bool) -> list:
    """The column's values as _shared makes them (as_key: each as its text, "" for None, as key columns are),
    without a Python step per row where the column's type allows: numbers are listed as they are (nothing to
    share), strings and numbers as keys are factorized and each distinct value made once."""
    kind = col.dtype.kind if isinstance(col.dtype, np.dtype) else None
    if not as_key and kind in ("i", "u", "f", "b"):
        return col.tolist()
    if kind in ("i", "u", "f", "b") or kind is None and pd.api.types.is_string_dtype(col.dtype):
        codes, uniques = pd.factorize(col, use_na_sentinel=True)
        if not (codes < 0).any():  # a missing value: the row-by-row path says what it becomes
            u = uniques.tolist()
            made = np.empty(len(u), dtype=object)
            made[:] = _shared([str(v) for v in u] if as_key else u)
            return made[codes].tolist()
    values = col.tolist()
    return _shared(["" if v is None else str(v) for v in values] if as_key else values)


class Records:
    """A run's rows as the comparison reads them: the columns it reads, as lists (a dict per row of a 300,000-row run
    cost seconds to make), and ``index``: key -> the row that counts for it (a resumed run may repeat a row: the last
    one measured counts, in the place of the first, as a dict filled in row order keeps them). ``record(i)`` is row i
    as a dict, made for the rows the comparison's general path reads; a GateRun's samples stay in its file until a
    row's noise test reads them."""

    def __init__(self, columns: dict[str, list], index: dict[tuple, int], samples=None, pos=None,
                 row_count: int = 0):
        self.columns, self.index, self.samples, self.pos = columns, index, samples, pos
        self.row_count = row_count  # rows read (a repeated key's earlier rows among them)

    def __len__(self) -> int:
        return len(self.index)

    def column(self, name: str, default=None) -> list:
        """The column's values by row; ``default`` in every row where the rows lack it (as dict.get gives)."""
        col = self.columns.get(name)
        return col if col is not None else _Constant(default)

    def record(self, i: int) -> dict:
        rec = {c: v[i] for c, v in self.columns.items()}
        if self.samples is not None:
            rec["samples_us"] = RowSamples(self.samples, self.pos[i])
        return rec


class _Constant:
    """A column every row of which holds one value."""

    def __init__(self, value):
        self.value = value

    def __getitem__(self, i):
        return self.value


def server_run_noise(base_recs: "Records", metrics: list[Metric], noise_floor: float = 0.0) -> dict:
    """RunNoise of each row of a server baseline, per metric name: the case's own run spread of that metric
    (<metric>_run_spread, recorded by a baseline of several runs: kbench.gate.server_baseline) and the median of it
    over the baseline's ok rows (at least noise_floor). {} when no row records a spread and noise_floor is 0."""
    state = base_recs.column("status")
    out: dict[str, list[RunNoise]] = {}
    for m in metrics:
        col = base_recs.column(m.spread_column) if m.spread_column else None
        own = {i: finite(col[i]) for i in base_recs.index.values()} if col is not None else {}
        ok = [v for i, v in own.items() if v is not None and state[i] == "ok"]
        if not ok and noise_floor <= 0:
            continue
        pooled = max(median(ok) if ok else 0.0, noise_floor)
        noise = [NO_NOISE] * base_recs.row_count
        for i in base_recs.index.values():
            noise[i] = RunNoise(own.get(i), pooled)
        out[m.name] = noise
    return out


def _records(run, kind: str, key_cols: tuple[str, ...], warnings: list[str], role: str,
             metrics: list[Metric] = (), skip: tuple[str, ...] = ()) -> Records:
    """The run's rows as Records (reference rows left out of a sweep: they are not gated)."""
    rows, pos = run.rows, range(len(run.rows))  # pos: the row's place in the run, where its samples are
    if kind == "sweep" and "path" in rows:
        keep = (rows["path"] != "reference").to_numpy()
        rows, pos = rows[keep], np.flatnonzero(keep).tolist()
    wanted = dict.fromkeys([*RECORD_COLUMNS, *(c for m in metrics for c in (m.column, m.samples_column,
                                                                             m.spread_column) if c)])
    samples = getattr(run, "samples", None)
    cols = [c for c in wanted if c in rows and c not in skip and not (samples is not None and c == "samples_us")]
    keys = list(zip(*(_column_values(rows[c], as_key=True) for c in key_cols)))
    index = dict(zip(keys, range(len(keys))))  # a repeated key: its last row, in the place of its first
    if len(index) < len(keys):
        warnings.append(f"{role} has {len(keys) - len(index)} duplicate row(s); the last of each counts")
    return Records({c: _column_values(rows[c], as_key=False) for c in cols}, index, samples, pos, len(keys))


def _band_why(noise: "RunNoise", k: float) -> str:
    if noise.own is not None and noise.own >= k * noise.pooled:
        return f"the row's run spread {noise.own:.1%}"
    return f"{k:g} x run noise {noise.pooled:.1%}"


def agrees(value: float, samples: list[float], role: str, rec: dict, metric: Metric) -> None:
    """BadInput unless a row's value lies among its own samples: a median (a run's, or the median of pooled runs'
    medians) is never below the least sample nor above the greatest, so a table whose medians were edited (x10)
    while its samples did not move is refused, not judged by samples that say something else."""
    if not samples:
        return
    lo, hi = min(samples), max(samples)
    if lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9):
        return
    raise BadInput(f"{role}: row {rec.get('kernel') or ''} {rec.get('case_id')}: {metric.column} {value:g} "
                   f"disagrees with its own samples ({len(samples)} of them, {lo:g}..{hi:g}): a median lies among "
                   f"its samples, so the table was edited or written by another tool; measure the run again")


def compare_metric(key, rec_b, rec_c, metric: Metric, threshold: float, alpha: float,
                   noise: "RunNoise | None" = None, k: float = DEFAULT_RUN_SPREAD_K,
                   defer: list | None = None, paired: bool = False, power: float = DEFAULT_POWER,
                   plan_alpha: float | None = None) -> RowResult:
    """One metric of one row pair, compared by the gate's rule: the one definition of it, used by compare_rows and
    by kbench.gate.sequential's per-round decision (`--repeat auto`). defer: a list to which the noise test is appended (as a function that completes the result) instead of
    being run, so that compare_rows reads the samples of every row to test in one pass. paired: the two rows are
    the sides of one interleaved run (kbench.gate.paired): the change and the test are the rounds' pairs'.
    plan_alpha: the run's whole alpha where ``alpha`` is one look's share of it (--repeat auto): the rounds that
    would decide an inconclusive row are projected at it, as a run given those rounds would test its last look at
    nearly all of it (at a look's 5e-5 they read about twice too many). Every row gets the smallest change its
    noise lets the test see (``detectable``, kbench.gate.power) and one of three answers (_decide)."""
    noise = noise or NO_NOISE
    band = max(threshold, noise.band(k))
    base = RowResult(key, str(key.get("kernel", "")), str(rec_b.get("case_id")), metric.name, "pass", False,
                     "ok", "ok", run_noise=noise.pooled, run_spread=noise.own, band=band)
    mb, mc = measurement(rec_b, metric, with_samples=False), measurement(rec_c, metric, with_samples=False)
    if mb is None or mc is None:
        base.outcome, base.note = "not-compared", f"no {metric.column} on the {'baseline' if mb is None else 'candidate'} side"
        base.base_value, base.cand_value = (mb.value if mb else None), (mc.value if mc else None)
        return base
    base.base_value, base.cand_value = mb.value, mc.value
    base.change = (mc.value - mb.value) / mb.value
    if paired:
        from kbench.gate.paired import round_pairs

        agrees(mb.value, samples_of(rec_b, metric), "baseline", rec_b, metric)
        agrees(mc.value, samples_of(rec_c, metric), "candidate", rec_c, metric)
        sb, sc, why = round_pairs(rec_b, rec_c, metric)
        if why is None and len(sb) >= 2:
            return _compare_paired(base, sb, sc, metric, alpha, power, plan_alpha)
        # a metric some rounds lack (vLLM's output throughput of a batch whose tokens came in one chunk): which
        # rounds a value belongs to is not known, and an unpaired test would compare two moments again
        base.outcome = "not-compared" if why else "inconclusive"
        base.note = f"not judged: {why or 'fewer than 2 rounds pair'}"
        return base
    worse = -base.change if metric.higher_is_better else base.change
    direction = "worse" if worse > 0 else "better"
    spread_det = _spread_detectable(rec_b, rec_c, mb, mc)

    def noise_test() -> None:
        verdict, det, rounds = None, spread_det, None
        if det is None or abs(worse) > band:
            mb.samples, mc.samples = samples_of(rec_b, metric), samples_of(rec_c, metric)  # only rows tested read them
            agrees(mb.value, mb.samples, "baseline", rec_b, metric)
            agrees(mc.value, mc.samples, "candidate", rec_c, metric)
            if det is None and len(mb.samples) >= 2 and len(mc.samples) >= 2:
                det = detectable_two_sample(mb.samples, mc.samples, metric.higher_is_better, alpha, power)
                scale = _log_scale(mb.samples, mc.samples)
                rounds = _needed(scale, min(len(mb.samples), len(mc.samples)), worse, band, metric, alpha, power,
                                 paired=False)
            if abs(worse) > band:
                verdict = is_worse(mb, mc, metric.higher_is_better, alpha, direction)
        limit = f"{band:.1%}" + (f" ({_band_why(noise, k)})" if band > threshold else "")
        _decide(base, worse, band, threshold, det, rounds, verdict, direction, limit,
                verdict.describe() if verdict else "", "samples per side")
        if base.outcome == "within-noise" and verdict is None:
            base.method = "run-spread"
            base.note = (f"{direction} by {abs(worse):.1%} but within the run-to-run band {band:.1%} "
                         f"({_band_why(noise, k)}); detectable {_pct(det)}")

    if defer is None:
        noise_test()
    else:
        defer.append((noise_test, [rec.get(metric.samples_column) for rec in (rec_b, rec_c)]))
    return base


def _spread_detectable(rec_b: dict, rec_c: dict, mb, mc) -> float | None:
    """A kernel row's detectable change from the two rows' intervals of the median (kbench.gate.power): their
    relative half-widths summed; None for rows without one (server rows: their samples say it)."""
    hb, hc = finite(rec_b.get("rel_spread")), finite(rec_c.get("rel_spread"))
    if hb is None or hc is None:
        if mb.low is None or mc.low is None:
            return None
        hb, hc = (mb.high - mb.low) / 2 / mb.value, (mc.high - mc.low) / 2 / mc.value
    return detectable_spread(hb, hc)


def _log_scale(a: list[float], b: list[float]) -> float:
    from kbench.gate.power import robust_scale

    la, lb = [math.log(x) for x in a if x > 0], [math.log(x) for x in b if x > 0]
    return math.sqrt((robust_scale(la) ** 2 + robust_scale(lb) ** 2) / 2)


def _needed(scale: float, n: int, worse: float, band: float, metric: Metric, alpha: float, power: float,
            paired: bool) -> int | None:
    """The rounds (samples per side) at which the row would be decided: its detectable change down to the band
    (what a PASS needs), or down to the part of the change beyond the band when that is larger (a FAIL sooner)."""
    from kbench.gate.power import rounds_to_decide

    target = max(band, (worse - band) / (1 + band))
    return rounds_to_decide(scale, n, target, metric.higher_is_better, alpha, power, paired)


def _compare_paired(base: RowResult, sb: list[float], sc: list[float], metric: Metric, alpha: float,
                    power: float = DEFAULT_POWER, plan_alpha: float | None = None) -> RowResult:
    """The rule of compare_metric on paired samples (kbench.gate.paired): the change is the rounds' median ratio,
    the noise test the signed-rank test of the ratios, the detectable change the ratios' own spread; the band is
    the threshold (the pairs carry the noise). The row's values are each side's median; the change is the paired
    one, and where the two disagree in sign the note says so."""
    from kbench.gate.paired import min_rounds, paired_change, paired_verdict
    from kbench.gate.power import paired_logs, paired_scale, serial_factor

    change = paired_change(sb, sc)
    base.change = change if change is not None else base.change
    worse = -base.change if metric.higher_is_better else base.change
    direction = "worse" if worse > 0 else "better"
    logs = paired_logs(sb, sc)
    f = serial_factor(logs)  # once for the row: the test, the detectable change and the rounds all count it
    det = detectable_paired(sb, sc, metric.higher_is_better, alpha, power, min_rounds(alpha), factor=f)
    rounds = _needed(paired_scale(logs, f), len(sb), worse, base.band, metric, max(alpha, plan_alpha or alpha),
                     power, True)
    if len(sb) < min_rounds(alpha):
        rounds = max(rounds or 0, min_rounds(alpha))
    verdict = None
    if abs(worse) > base.band:
        verdict = paired_verdict(sb, sc, metric.higher_is_better, alpha, direction, base.band, factor=f)
    test = f"paired Wilcoxon p={verdict.p_value:.2g} over {len(sb)} rounds" if verdict else f"paired, {len(sb)} rounds"
    if f > 1:  # kbench.gate.power: the test and the detectable change counted them as fewer
        test += f" (they drift together: worth about {len(sb) / f:.0f} independent ones)"
    _decide(base, worse, base.band, base.band, det, rounds, verdict, direction, f"{base.band:.1%}", test, "rounds")
    medians = (base.cand_value - base.base_value) / base.base_value if base.base_value else 0.0
    if medians * base.change < 0 and abs(medians) > 1e-9:
        base.note += (f"; the sides' medians differ by {medians:+.1%}, the other way: the change is the rounds' "
                      f"median B/A ratio, which cancels what the machine did in each round")
    return base


def _decide(base: RowResult, worse: float, band: float, threshold: float, det: float | None, rounds: int | None,
            verdict, direction: str, limit: str, test: str, unit: str) -> None:
    """A row's answer from its change (``worse``: in the bad direction), its band, its detectable change and, for
    a change beyond the band, its noise test: a **regression** (FAIL) when the change beyond the band is
    significant, an **improvement** when a change the other way is; **pass** (or **within-noise**: beyond the
    threshold, inside a run-to-run band) only where the change is inside the band AND the row could have seen one
    of the band's size (detectable <= band); **inconclusive** otherwise."""
    base.detectable = det
    if verdict is not None:
        base.method, base.p_value = verdict.method, verdict.p_value
        if verdict.beyond_noise and verdict.method != "threshold-only":
            if direction == "worse":
                base.outcome, base.fails = "regression", True
                base.note = f"worse by {worse:.1%} > {limit}, {test}"
            else:
                base.outcome, base.note = "improvement", f"better by {-worse:.1%} > {limit}, {test}"
            return
    seen = det is not None and det <= band
    if worse <= band and seen:
        if worse < -band:  # better beyond the band, not significantly: still not worse than the band
            base.outcome = "pass"
            base.note = f"better by {-worse:.1%}, not significant ({test}); detectable {_pct(det)} <= {limit}"
        else:
            base.outcome = "pass" if abs(worse) <= threshold else "within-noise"
            base.note = f"within {limit} ({worse:+.1%}); detectable {_pct(det)}" + (f", {test}" if test else "")
        return
    base.outcome = "inconclusive"
    base.rounds_needed = rounds
    why = ("no samples or spread recorded: its noise is unknown" if det is None else
           f"detectable {_pct(det)} > {limit}")
    more = f"; about {rounds} {unit} would decide it" if rounds else ""
    base.note = f"{direction} by {abs(worse):.1%}, cannot tell: {why}" + (f" ({test})" if test else "") + more


def compare_rows(base_recs: Records, cand_recs: Records, key_cols, metrics: list[Metric], threshold: float,
                 alpha: float, allow_missing: bool, noise: list | None = None,
                 k: float = DEFAULT_RUN_SPREAD_K, paired: bool = False,
                 metric_noise: dict | None = None, power: float = DEFAULT_POWER,
                 case_alpha: dict | None = None, plan_alpha: float | None = None) -> list[RowResult]:
    """noise: run_noise_of(base_recs). paired: the runs are the two sides of one interleaved run. metric_noise:
    server_run_noise(base_recs, ...), which replaces noise for the metrics it holds."""
    metric_noise = metric_noise or {}
    results = []
    tests: list = []  # the noise tests, run below once the samples they need are read
    b_state, c_state = base_recs.column("status"), cand_recs.column("status")
    b_case, c_reason = base_recs.column("case_id"), cand_recs.column("reason")
    b_vals = [base_recs.column(m.column) for m in metrics]
    c_vals = [cand_recs.column(m.column) for m in metrics]
    b_spread, c_spread = base_recs.column("rel_spread"), cand_recs.column("rel_spread")
    at_kernel = key_cols.index("kernel") if "kernel" in key_cols else None  # a key's values are texts already
    cand_at, inf = cand_recs.index.get, math.inf
    for k_, i in base_recs.index.items():
        key = dict(zip(key_cols, k_))
        kernel, case_id = k_[at_kernel] if at_kernel is not None else "", str(b_case[i])
        j = cand_at(k_)
        # the common row, ok on both sides and within the threshold on every metric: passed as compare_metric
        # passes it, without the general path's dicts (most of a 300,000-row gate's rows)
        if j is not None and b_state[i] == "ok" and c_state[j] == "ok" and not paired and not metric_noise:
            passed = []
            hb, hc = b_spread[i], c_spread[j]  # a kernel row's CI half-width: what it could see (kbench.gate.power)
            det = hb + hc if type(hb) is float and type(hc) is float and hb >= 0.0 and hc >= 0.0 else inf
            for m, bv, cv in zip(metrics, b_vals, c_vals):
                if det > threshold:
                    break
                vb, vc = bv[i], cv[j]
                if type(vb) is not float or type(vc) is not float or not (0.0 < vb < inf and 0.0 < vc < inf):
                    break
                ch = (vc - vb) / vb
                if abs(ch) > threshold:  # |worse| is |change| whichever way the metric goes
                    break
                passed.append((m.name, vb, vc, ch))
            else:
                n = (noise[i] if noise else None) or NO_NOISE
                band = max(threshold, n.band(k))
                for name, vb, vc, ch in passed:
                    results.append(RowResult(key, kernel, case_id, name, "pass", False, "ok", "ok", vb, vc, ch, None,
                                             None, f"within {band:.1%} ({ch:+.1%}); detectable {det:.1%}", n.pooled,
                                             n.own, band, det))
                continue
        sb = status_value(b_state[i])
        if j is None:
            results.append(RowResult(key, kernel, case_id, None, "missing", not allow_missing, sb, None,
                                     note="not in the candidate" + (" (allowed)" if allow_missing else "")))
            continue
        sc = status_value(c_state[j])
        if sb != "ok" and paired:  # one measurement: A's side failing is the run's failure, never "not compared"
            reason = str(base_recs.column("reason")[i] or "")
            results.append(RowResult(key, kernel, case_id, None, "failed", True, sb, sc,
                                     note=f"A's side {sb}" + (f": {reason}" if reason else "")))
            continue
        if sb != "ok":
            note = f"baseline status {sb}" + ("; fixed in the candidate" if sc == "ok" else "")
            results.append(RowResult(key, kernel, case_id, None, "not-compared", False, sb, sc, note=note))
            continue
        if sc in ("wrong", "failed"):
            reason = str(c_reason[j] or "")
            results.append(RowResult(key, kernel, case_id, None, sc, True, sb, sc,
                                     note=f"was ok, now {sc}" + (f": {reason}" if reason else "")))
            continue
        if sc != "ok":
            reason = str(c_reason[j] or "")
            results.append(RowResult(key, kernel, case_id, None, "skipped", not allow_missing, sb, sc,
                                     note=f"was ok, now {sc}" + (f": {reason}" if reason else "")
                                     + (" (allowed)" if allow_missing else "")))
            continue
        rb, rc = base_recs.record(i), cand_recs.record(j)  # a row each side as a dict: the general path
        for m in metrics:
            why = [f"{side} {w}" for side, w in (("candidate", broken(rc, m)), ("baseline", broken(rb, m))) if w]
            if why:  # an ok row without a real measurement is broken: a failure, never "not compared"
                results.append(RowResult(key, kernel, case_id, m.name, "invalid", True, sb, sc,
                                         number(rb.get(m.column)), number(rc.get(m.column)),
                                         note="; ".join(why) + ": an ok row must carry a finite, positive "
                                         f"{m.column}"))
                continue
            n = metric_noise[m.name][i] if m.name in metric_noise else (noise[i] if noise else None)
            a_ = case_alpha.get(case_id, alpha) if case_alpha else alpha  # --repeat auto: the look that decided it
            results.append(compare_metric(key, rb, rc, m, threshold, a_, n, k, tests, paired, power,
                                          plan_alpha=plan_alpha or alpha))
    for k_, j in cand_recs.index.items():
        if k_ not in base_recs.index:
            key = dict(zip(key_cols, k_))
            rc = cand_recs.record(j)
            results.append(RowResult(key, str(key.get("kernel", "")), str(rc.get("case_id")), None, "new", False,
                                     None, status(rc), note="not in the baseline"))
    read_samples([s for _, samples in tests for s in samples])
    for noise_test, _ in tests:
        noise_test()
    return results


def _missing(v) -> bool:
    return v is None or v != v


def _path(rec: dict):
    """path_verdict (decode | context | tie, when winners.py gives it: ties within spread) else winner_path."""
    v = rec.get("path_verdict")
    return rec.get("winner_path") if _missing(v) else v


def _run_tie(rec: dict, noise_by_kernel_case: dict, k: float) -> bool:
    """Best decode and best context of one side within the run-to-run band of each other (module docstring);
    noise_by_kernel_case holds each row's max(k * run_noise, run_spread)."""
    d, c = finite(rec.get("decode_us")), finite(rec.get("context_us"))
    if d is None or c is None or min(d, c) <= 0:
        return False
    cid = str(rec.get("case_id"))
    rn = max(noise_by_kernel_case.get((str(rec.get("best_decode")), cid), 0.0),
             noise_by_kernel_case.get((str(rec.get("best_context")), cid), 0.0))
    return rn > 0 and abs(d - c) / min(d, c) <= rn


MOVEMENT_MIN_ROWS = 8  # a pair's run-to-run movement is estimated from at least this many passing kernel rows


def pair_movement(rows: list["RowResult"]) -> float | None:
    """How far this pair's kernel rows moved between the two runs when nothing changed: the 90th percentile of
    ``|change - median change|`` over the rows that pass (a common shift of every row moves no winner). None with
    fewer than MOVEMENT_MIN_ROWS such rows. A single-run baseline knows no run-to-run noise; the pair's own rows
    show it (two H100 sweeps of one card: rows moved 0.4% median, 1.1% p95)."""
    ch = [r.change for r in rows if r.outcome in ("pass", "within-noise") and r.change is not None
          and r.metric == "median_us" and math.isfinite(r.change)]
    if len(ch) < MOVEMENT_MIN_ROWS:
        return None
    mid = float(np.median(ch))
    return float(np.percentile([abs(c - mid) for c in ch], 90))


def _lead(rec: dict) -> float | None:
    """The winner's lead on one side: |decode - context| / min(decode, context); None without both."""
    d, x = finite(rec.get("decode_us")), finite(rec.get("context_us"))
    if d is None or x is None or min(d, x) <= 0:
        return None
    return abs(d - x) / min(d, x)


def _flip_within_threshold(c: dict, threshold: float | None) -> bool:
    """A flip whose new winner leads by at most ``threshold`` in the candidate: the old choice costs at most the
    change the gate counts (module docstring)."""
    lead = _lead(c)
    return threshold is not None and lead is not None and lead <= threshold


def _flip_within_movement(b: dict, c: dict, movement: float | None) -> bool:
    """A flip whose two gaps (the old winner's lead in the baseline, the new one's in the candidate, relative)
    add up to no more than two rows' movement between these runs (pair_movement): the decode-context order moved
    by less than the two kernels' own times move between runs of nothing changed, so it is not told apart from
    noise: a tie, not a change of winner."""
    if movement is None:
        return False
    gaps = [_lead(r) for r in (b, c)]
    return None not in gaps and sum(gaps) <= 2 * movement


def _winner_records(w: pd.DataFrame) -> list[dict]:
    """case_winners() lines as dicts of the columns compare_winners reads."""
    cols = ["case_id", "decode_us", "context_us", "path_verdict", "winner_path", "winner", "best_decode",
            "best_context", "decode_speedup"]
    return [dict(zip(cols, vals)) for vals in zip(*(w[c].tolist() for c in cols))]


def compare_winners(wb: pd.DataFrame, wc: pd.DataFrame, ignore: bool,
                    noise_by_kernel_case: dict | None = None, k: float = DEFAULT_RUN_SPREAD_K,
                    ties: list[str] | None = None,
                    movement: float | None = None,
                    threshold: float | None = None) -> tuple[list[WinnerChange], list[str]]:
    """Winner path changes between decode and context, per case measured on both paths in both runs (wb, wc: the
    case_winners() of the baseline's and the candidate's rows).
    A tie (best decode and best context within their spreads, winners.py's path_verdict, or within
    the run-to-run band, or within this pair's own run-to-run movement: _flip_within_movement, or a new winner
    leading by at most ``threshold``: _flip_within_threshold) is not a change; flips that only these rules turned
    into ties go to ``ties``."""
    noise_by_kernel_case = noise_by_kernel_case or {}
    if wb.empty or wc.empty:
        return [], []
    cand_by_case = {r["case_id"]: r for r in _winner_records(wc)}
    changes, compared = [], []
    for b in _winner_records(wb):
        c = cand_by_case.get(b["case_id"])
        if c is None:
            continue
        if any(_missing(r.get(f"{p}_us")) for r in (b, c) for p in ("decode", "context")):
            continue  # a path gone (wrong, missing) fails as a row; a winner needs both paths
        pb, pc = _path(b), _path(c)
        compared.append(str(b["case_id"]))
        if pb not in ("decode", "context") or pc not in ("decode", "context"):
            continue  # a tie on either side (or one path gone) is not a change of winner
        if pb != pc and (_run_tie(b, noise_by_kernel_case, k) or _run_tie(c, noise_by_kernel_case, k)
                         or _flip_within_movement(b, c, movement) or _flip_within_threshold(c, threshold)):
            if ties is not None:
                ties.append(str(b["case_id"]))
            continue
        if pb != pc:
            changes.append(WinnerChange(str(b["case_id"]), pb, pc, b.get("winner"), c.get("winner"),
                                        b.get("decode_speedup"), c.get("decode_speedup"), not ignore))
    return changes, compared


def _same_power_state(base_rows: pd.DataFrame, cand_rows: pd.DataFrame) -> None:
    """The gate compares like with like: both runs measured in the same timing state(s) (kbench.timing.power), or
    BadInput (not overridable by --force: a sustained time is not a regression of an unthrottled one)."""
    from kbench.timing.states import states_of

    sb, sc = states_of(base_rows), states_of(cand_rows)
    if sb != sc:
        raise BadInput(f"refusing to mix timing states: the baseline is {'+'.join(sb)}, the candidate "
                       f"{'+'.join(sc)}; gate runs swept with the same --power")


def run_gate(baseline_path: str | Path, candidate_path: str | Path, threshold: float = DEFAULT_THRESHOLD,
             alpha: float = DEFAULT_ALPHA, ignore_winner_change: bool = False, allow_missing: bool = False,
             force: bool = False, run_spread_k: float = DEFAULT_RUN_SPREAD_K,
             noise_floor: float = DEFAULT_NOISE_FLOOR, power: float = DEFAULT_POWER) -> GateResult:
    """Compare a candidate run with a baseline. threshold and noise_floor: a fraction or a percentage text ('5%',
    as --threshold takes it). Raises BadInput for unusable input or incomparable runs."""
    if isinstance(threshold, str):
        threshold = parse_threshold(threshold)
    if isinstance(noise_floor, str):
        noise_floor = parse_threshold(noise_floor, "--noise-floor")
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not (0 <= threshold < 1):
        raise BadInput(f"threshold {threshold!r}: must be a fraction between 0 and 1")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (0 < alpha < 1):
        raise BadInput(f"--alpha {alpha!r}: must be a number between 0 and 1")
    if isinstance(power, bool) or not isinstance(power, (int, float)) or not (0.5 <= power < 1):
        raise BadInput(f"--power {power!r}: must be a number from 0.5 to below 1")
    if isinstance(run_spread_k, (bool, str)) or finite(run_spread_k) is None or not (0 <= run_spread_k <= 100):
        raise BadInput(f"--run-spread-k {run_spread_k!r}: must be a number between 0 and 100")
    if isinstance(noise_floor, bool) or finite(noise_floor) is None or not (0 <= noise_floor < 1):
        raise BadInput(f"--noise-floor {noise_floor!r}: must be a fraction between 0 and 1")
    warnings: list[str] = []
    columns = _gate_columns()
    base = load_for_gate(baseline_path, "baseline", force, warnings, columns)
    cand = load_for_gate(candidate_path, "candidate", force, warnings, columns)
    if base.kind != cand.kind:
        raise BadInput(f"cannot compare a {base.kind} run (baseline) with a {cand.kind} run (candidate)")
    if base.kind == "sweep":
        _same_power_state(base.rows, cand.rows)
    verdict = comparable(base, cand, GATE)
    reasons = verdict.refusals
    if reasons and not force:
        raise BadInput(f"refusing to compare: {'; '.join(reasons)}; pass --force to compare anyway")
    schema = [w for w in verdict.warnings if w.startswith("result schema")]
    warnings += schema + [f"{r}; compared anyway (--force)" for r in reasons] + [w for w in verdict.warnings if w not in schema]

    kind = base.kind
    key_cols = key_columns(kind, set(base.rows.columns) & set(cand.rows.columns))
    if "case_id" not in key_cols:
        raise BadInput("rows lack a case_id column")
    metrics = metrics_for(kind, base.rows.columns, cand.rows.columns)
    if not metrics:
        raise BadInput(f"no metric the gate knows in both {kind} runs")
    # the winners first, while the rows are all the gate holds (their temporaries took 250 MB at 300,000 rows)
    winners = (case_winners(base.rows), case_winners(cand.rows)) if kind == "sweep" else None
    release_memory()
    pair, case_alpha, plan_alpha = None, {}, alpha
    if kind == "server-bench":
        from kbench.gate.paired import halves, min_rounds

        pair = halves(base, cand, warnings)
        looked = pair.get("alpha_spent") if pair else None  # --repeat auto: the alpha its last look had
        if isinstance(looked, float) and 0 < looked < alpha:
            warnings.append(f"the interleaved run looked at its rounds {pair.get('looks')} times (--repeat auto): "
                            f"the gate tests each case at the alpha of the look that decided it (the last: "
                            f"{looked:.3g}), so that the false-alarm rate stays {alpha:g} over the looks")
            ca = pair.get("case_alpha")
            case_alpha = {str(c): min(float(v), alpha) for c, v in ca.items() if isinstance(v, (int, float))
                          and 0 < v} if isinstance(ca, dict) else {}
            alpha = looked
        if pair and pair.get("two_processes_one_host"):
            warnings.append("A and B are two server processes on one host: their own offset can be as large as a "
                            "change (two vLLM CPU processes on a 2-core machine: 0.84 to 1.28 B/A pair to pair, "
                            "docs/gate.md); an A/A of the two, the same setting on both, tells its size on yours")
        ran = pair.get("rounds_run", pair.get("rounds")) if pair else None
        if pair and isinstance(ran, int) and ran < min_rounds(alpha):
            warnings.append(f"the interleaved run has {ran} rounds: the paired test cannot reach alpha "
                            f"{alpha:g} with fewer than {min_rounds(alpha)} (kbench server-bench --repeat "
                            f"{min_rounds(alpha)} or more); it finds no difference")
    base_recs = _records(base, kind, key_cols, warnings, "baseline", metrics,
                         skip=("reason",) if kind == "sweep" else ())
    cand_recs = _records(cand, kind, key_cols, warnings, "candidate", metrics)
    if not base_recs:
        ref_ok = int(((base.rows.get("path") == "reference") & (base.rows.get("status") == "ok")).sum()) \
            if kind == "sweep" and {"path", "status"} <= set(base.rows.columns) else 0
        if ref_ok:
            raise BadInput(f"baseline {baseline_path}: its {ref_ok} ok row(s) are all reference rows (the float32 "
                           f"oracle, timed only on a CPU), and reference rows are not gated; gate runs with kernel "
                           f"rows, e.g. the committed H200 baseline results/baselines/h200-draft-extend-kv4096")
        raise BadInput(f"baseline {baseline_path}: no rows to compare")
    n_runs = num_runs(base.manifest)
    has_spread = "run_spread" in base.rows and base.rows["run_spread"].notna().any()
    if kind == "sweep" and not has_spread and noise_floor <= 0:
        warnings.append(f"baseline {'has a single run' if n_runs < 2 else 'records no run_spread'}: run-to-run "
                        "noise is unknown, only within-run noise is tested; record it with "
                        "`kbench baseline RUN1 RUN2 ... --name NAME` (or pass --noise-floor)")
    if kind == "sweep" and {"path", "status"} <= set(base.rows.columns):
        n_ref = int(((base.rows["path"] == "reference") & (base.rows["status"] == "ok")).sum())
        if n_ref:
            warnings.append(f"{n_ref} ok reference row(s) are not gated (the float32 oracle, timed only on a "
                            f"CPU); a CPU run has no kernel rows to gate: the gate wants two runs of one GPU, e.g. the "
                            f"committed H200 ones: kbench gate --baseline results/baselines/"
                            f"h200-power-both-kv4096-sweep1 --candidate results/baselines/"
                            f"h200-power-both-kv4096-sweep2 --noise-floor 1%")
    hardware = hardware_of(base).describe(), hardware_of(cand).describe()
    base.rows = cand.rows = None  # read: what the comparison needs is in the records (and the winners)
    release_memory()
    noise = run_noise_of(base_recs, noise_floor)
    metric_noise = server_run_noise(base_recs, metrics, noise_floor) if kind == "server-bench" and not pair else {}
    if kind == "server-bench" and not pair and not metric_noise:
        warnings.append("the baseline is a single server-bench run: only the noise within each run (its repeats) "
                        "is tested, not from one run to the next; a neighbour busy during one run can fail the gate. "
                        "Run A and B interleaved (kbench server-bench --url A --url-b B), or gate against a baseline "
                        "of several runs (kbench baseline RUN1 RUN2 RUN3 --name NAME)")
    rows = compare_rows(base_recs, cand_recs, key_cols, metrics, threshold, alpha, allow_missing, noise,
                        run_spread_k, paired=bool(pair), metric_noise=metric_noise, power=power,
                        case_alpha=case_alpha, plan_alpha=plan_alpha)
    if pair:
        _check_paired(rows)
    del cand_recs  # a row's record per row of each run: let go of them before the winners are compared
    ties: list[str] = []
    if kind == "sweep":
        by_kc: dict[tuple[str, str], float] = {}
        b_kernel, b_case = base_recs.column("kernel", ""), base_recs.column("case_id")
        for i in base_recs.index.values():
            kc = (str(b_kernel[i]), str(b_case[i]))
            by_kc[kc] = max(by_kc.get(kc, 0.0), noise[i].band(run_spread_k))
        del base_recs, noise
        changes, compared = compare_winners(*winners, ignore_winner_change, by_kc, run_spread_k, ties,
                                            pair_movement(rows), threshold)
    else:
        changes, compared = [], []
    used = _noise_used(kind, pair, metric_noise, n_runs, threshold, alpha, run_spread_k, noise_floor, power)
    return GateResult(str(baseline_path), str(candidate_path), kind, threshold, alpha, rows, changes, compared,
                      *hardware, warnings,
                      {"ignore_winner_change": ignore_winner_change, "allow_missing": allow_missing,
                       "force": force, "run_spread_k": run_spread_k, "noise_floor": noise_floor},
                      n_runs, run_spread_k, noise_floor, ties, pair, used, power)


def _check_paired(rows: list[RowResult]) -> None:
    """The halves of one interleaved run whose rounds pair for no metric of any case: bad input, saying why (the
    gate would otherwise answer "nothing compared" about a measurement it could not read)."""
    metric_rows = [r for r in rows if r.metric is not None and r.outcome not in ("invalid",)]
    unpaired = [r for r in metric_rows if r.outcome == "not-compared" and r.note.startswith("not judged: ")]
    if metric_rows and len(unpaired) == len(metric_rows):
        r = unpaired[0]
        raise BadInput(f"the interleaved run's halves cannot be paired round by round ({r.case_id} {r.metric}: "
                       f"{r.note.removeprefix('not judged: ')}); gate halves that hold their rounds "
                       f"(kbench server-bench writes sample_rounds)")


def _noise_used(kind: str, pair: dict | None, metric_noise: dict, n_runs: int, threshold: float, alpha: float,
                k: float, noise_floor: float, power: float = DEFAULT_POWER) -> str:
    """The noise the rule tested against, one line (what `kbench gate` prints above its verdict)."""
    head = f"threshold {threshold:.1%}, alpha {alpha:g}, power {power:g}; "
    floor = f", noise floor {noise_floor:.1%}" if noise_floor else ""
    if pair:
        return (head + f"noise: paired, the {pair.get('rounds_run', pair.get('rounds'))} {pair.get('order', 'ABBA')} rounds of one "
                f"interleaved run (one-sided Wilcoxon signed-rank: the rounds' B/A ratios beyond the threshold)")
    if kind == "server-bench":
        if not metric_noise:
            return (head + f"noise: within each run only (Mann-Whitney on the repeats); run-to-run noise unknown "
                    f"(baseline of {n_runs} run{'s' if n_runs != 1 else ''}){floor}")
        per = ", ".join(f"{name} {next(n.pooled for n in noise if n is not None):.1%}"
                        for name, noise in metric_noise.items())
        return (head + f"noise: between runs, from a baseline of {n_runs} runs (median run spread: {per}){floor}; "
                f"band max(threshold, {k:g} x that, the case's own run spread), then Mann-Whitney on the repeats")
    runs = f"baseline of {n_runs} run{'s' if n_runs != 1 else ''}"
    return head + f"{runs}, band max(threshold, {k:g} x run noise, run spread){floor}"
