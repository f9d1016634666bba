"""Is a difference between two measurements beyond their noise?

Two ways, picked by what the rows kept:

- both sides kept per-sample times (``samples_us``, or per-repeat values for server runs) and enough of
  them that the test can reach ``alpha`` at all: a one-sided Mann-Whitney U test
  (scipy.stats.mannwhitneyu), significant when p < alpha;
- otherwise the spread intervals: ``median * (1 +- rel_spread)`` (the 95% CI of the median the timer
  reports), else ``[p25, p75]``; the difference is beyond noise when the intervals do not overlap, i.e.
  the gap is larger than the two half-widths together;
- with neither samples nor a spread (server rows without repeats) there is nothing to judge noise by,
  and the threshold alone decides (method "threshold-only").
"""
from __future__ import annotations

import math
from dataclasses import dataclass



@dataclass
class GateValue:
    value: float
    samples: list[float]
    low: float | None = None  # the spread interval, when the row has one
    high: float | None = None


@dataclass
class NoiseVerdict:
    method: str  # mann-whitney | spread | threshold-only
    beyond_noise: bool
    p_value: float | None = None

    def describe(self) -> str:
        if self.method == "mann-whitney":
            return f"Mann-Whitney p={self.p_value:.2g}"
        if self.method == "spread":
            return "spreads disjoint" if self.beyond_noise else "spreads overlap"
        return "no spread recorded"


def _min_p(n: int, m: int) -> float:
    """The smallest one-sided p the exact test can give: every sample of one side below every other. In logs: the
    binomial coefficient of two sides of 500 samples each is beyond a float (1 / it underflows to 0.0)."""
    try:
        return 1.0 / math.comb(n + m, n)
    except OverflowError:
        return 0.0


def mann_whitney_p(x: list[float], y: list[float], alternative: str) -> float:
    """The p of scipy's Mann-Whitney U test of x against y (method auto), for finite samples. scipy's test is
    wrapped by its NaN-policy and broadcasting layer, half the cost of a call on one pair of short samples (the
    gate runs 2,000 at 300,000 rows); finite 1-D samples need none of it, so the test itself is called where scipy
    exposes it (the wrapper's __wrapped__), the same computation (tests/test_gate_stats.py checks the p against the
    public call)."""
    from scipy.stats import mannwhitneyu  # imported here: scipy.stats takes most of a second to import

    test = getattr(mannwhitneyu, "__wrapped__", None)
    if test is None:
        return float(mannwhitneyu(x, y, alternative=alternative).pvalue)
    import numpy as np

    return float(test(np.asarray(x, dtype=float), np.asarray(y, dtype=float), alternative=alternative).pvalue)


def is_worse(base: GateValue, cand: GateValue, higher_is_better: bool, alpha: float,
             direction: str) -> NoiseVerdict:
    """Is ``cand`` worse (direction="worse") or better ("better") than ``base`` beyond noise?"""
    cand_larger = (direction == "worse") != higher_is_better  # for time, worse = larger
    bs = [x for x in base.samples if x is not None and math.isfinite(x)]
    cs = [x for x in cand.samples if x is not None and math.isfinite(x)]
    if len(bs) >= 2 and len(cs) >= 2 and _min_p(len(bs), len(cs)) < alpha:
        alt = "greater" if cand_larger else "less"
        p = mann_whitney_p(cs, bs, alt)
        return NoiseVerdict("mann-whitney", p < alpha, p)
    if None not in (base.low, base.high, cand.low, cand.high):
        disjoint = cand.low > base.high if cand_larger else cand.high < base.low
        return NoiseVerdict("spread", bool(disjoint))
    return NoiseVerdict("threshold-only", True)
