"""What a comparison could have seen: the smallest change detectable from its own noise, and the rounds that would
decide a row it cannot.

A gate that only asks "is the difference significant?" passes every row it has too little data to judge: a 25%
slowdown measured through noise of +-100% is "within noise", and the gate says PASS. So each compared row also gets

    detectable = the smallest change (in the bad direction, as a fraction) that a one-sided test at ``alpha`` finds
                 with probability ``power``, given the spread the row's own samples show and how many there are

and the gate's three verdicts follow (kbench.gate.compare): PASS only where ``detectable <= band`` and the measured
change is inside the band, FAIL where the change beyond the band is significant, INCONCLUSIVE otherwise.

How the spread is measured, per kind of row (all on log values, so a 2x slower and a 2x faster batch weigh alike):

- paired rounds (the halves of one interleaved server-bench run): d_i = log(b_i / a_i); scale s = 1.4826 MAD(d)
  (a robust standard deviation: one burst does not widen it) times sqrt(f), f the rounds' serial factor (below);
  detectable log change ``delta = (t_{1-alpha} + t_{power}) * sqrt(pi / 3) * s / sqrt(n)`` (Student t with n - 1
  degrees of freedom; sqrt(pi / 3): the signed-rank test's efficiency against the t test on normal data, 3 / pi);
- two independent samples (a server run's repeats, Mann-Whitney): the same with s the pooled robust scale of the
  two sides' logs and ``sqrt(1/n1 + 1/n2)`` for ``1/sqrt(n)``;
- a kernel row's confidence interval of the median (``rel_spread``, the timer's 95% CI half-width): the change at
  which the two rows' intervals stop overlapping, ``rel_spread_base + rel_spread_cand`` (the gate's rule for such
  rows);
- nothing (no samples, no spread): unknown, and the row cannot pass.

**Rounds next to each other are alike** on a machine whose processes drift for tens of seconds (two server
processes on two busy cores: one side slower for half a minute, then the other), and n such rounds hold less than
n independent ones. ``serial_factor(d)`` measures how much less: the long-run variance of the rounds' centred
signed ranks (Newey-West, Bartlett weights up to lag ``floor(sqrt(n))``) over their plain variance, at least 1.
Rounds that are independent give about 1 (and fewer than 20 rounds count as independent); a drift gives more,
and the test (kbench.gate.paired) and the detectable change count the rounds as ``n / f``.

A test whose smallest possible p is not below alpha (the exact signed-rank test with fewer than 7 rounds at 0.01)
detects nothing: detectable is infinite. ``rounds_to_decide`` inverts the formula (normal quantiles): the rounds at
which the detectable change would reach what decides the row.
"""
from __future__ import annotations

import math
from statistics import NormalDist, median

DEFAULT_POWER = 0.8
WILCOXON_EFFICIENCY = 3 / math.pi  # asymptotic relative efficiency of the signed-rank (and rank-sum) test vs t
MAD_TO_SD = 1.4826


def robust_scale(values: list[float]) -> float:
    """1.4826 x the median absolute deviation (a standard deviation for normal data, unmoved by a few outliers);
    the standard deviation when more than half the values are equal (MAD 0), 0 for fewer than 2 values."""
    if len(values) < 2:
        return 0.0
    m = median(values)
    mad = median(abs(v - m) for v in values)
    if mad > 0:
        return MAD_TO_SD * mad
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _quantiles(alpha: float, power: float, dof: int | None) -> float:
    if dof is not None and dof >= 1:
        from scipy.stats import t  # imported here: scipy.stats takes most of a second to import

        return float(t.isf(alpha, dof) + t.ppf(power, dof))  # isf: exact for the tiny alphas of early looks
    nd = NormalDist()
    return -nd.inv_cdf(alpha) + nd.inv_cdf(power)


def _to_fraction(delta_log: float, higher_is_better: bool) -> float:
    """A log change in the bad direction as the fraction the gate's ``worse`` measures: (b - a) / a for times,
    (a - b) / a for throughputs."""
    if math.isinf(delta_log):
        return math.inf
    return math.expm1(delta_log) if not higher_is_better else -math.expm1(-delta_log)


def _to_log(fraction: float, higher_is_better: bool) -> float:
    if not higher_is_better:
        return math.log1p(fraction)
    return -math.log1p(-fraction) if fraction < 1 else math.inf


def paired_logs(base: list[float], cand: list[float]) -> list[float]:
    return [math.log(c / b) for b, c in zip(base, cand) if b > 0 and c > 0]


SERIAL_MIN_ROUNDS = 20  # serial_factor: fewer rounds count as independent


def serial_lag(n: int) -> int:
    """The truncation lag for n rounds: floor(sqrt(n)) (5 at 27 rounds, 8 at 64, 11 at 125), longer than
    Newey-West's usual n ** (1/3): a server's drift lasts tens of rounds, and a short lag misses most of it."""
    return max(1, int(math.sqrt(n)))


def serial_factor(d: list[float]) -> float:
    """How many independent rounds one round of ``d`` is worth, inverted (module docstring): the Bartlett-weighted
    long-run variance of the centred signed ranks of ``d - median(d)`` (average ranks over ties, 0 for a value at
    the median, as the signed-rank test drops zeros) over their variance; at least 1 (a negative autocorrelation
    never makes the rounds count more), 1 below SERIAL_MIN_ROUNDS rounds (too few to estimate a dependence: a test's
    8 independent rounds read 1.06, enough to move its exact p of 1/256 to 0.0046)."""
    n = len(d)
    if n < SERIAL_MIN_ROUNDS:
        return 1.0
    import numpy as np
    from scipy.stats import rankdata  # imported here: scipy.stats takes most of a second to import

    dev = np.asarray(d, dtype=float) - median(d)
    x = np.zeros(n)
    nz = dev != 0
    x[nz] = np.sign(dev[nz]) * rankdata(np.abs(dev[nz]))
    x -= x.mean()
    g0 = float(x @ x) / n
    if g0 <= 0:
        return 1.0
    lag = serial_lag(n)
    lrv = g0 + 2 * sum((1 - k / (lag + 1)) * float(x[k:] @ x[:-k]) / n for k in range(1, min(lag, n - 1) + 1))
    # Bartlett's estimate scatters by about sqrt(4 lag / 3n) around 1 on independent rounds: only what is beyond
    # that counts (else independent rounds would count as fewer about half the time, and cost power for nothing)
    return max(1.0, lrv / g0 - math.sqrt(4 * lag / (3 * n)))


def paired_scale(d: list[float], factor: float | None = None) -> float:
    """The spread of one round's log ratio that the paired test and its power count: robust_scale(d) x
    sqrt(f), f the rounds' serial factor (``factor`` when the caller has it, else serial_factor(d))."""
    return robust_scale(d) * math.sqrt(serial_factor(d) if factor is None else factor)


def detectable_paired(base: list[float], cand: list[float], higher_is_better: bool, alpha: float,
                      power: float = DEFAULT_POWER, min_n: int = 2, factor: float | None = None) -> float:
    """The smallest change the paired test detects (module docstring), as a fraction; inf below ``min_n`` rounds.
    factor: the rounds' serial factor when the caller has it (else computed)."""
    d = paired_logs(base, cand)
    n = len(d)
    if n < max(min_n, 2):
        return math.inf
    s = paired_scale(d, factor)
    delta = _quantiles(alpha, power, n - 1) * math.sqrt(1 / WILCOXON_EFFICIENCY) * s / math.sqrt(n)
    return _to_fraction(delta, higher_is_better)


def detectable_two_sample(base: list[float], cand: list[float], higher_is_better: bool, alpha: float,
                          power: float = DEFAULT_POWER) -> float:
    """The smallest change a one-sided rank-sum test of two independent samples detects (module docstring)."""
    lb = [math.log(x) for x in base if x > 0]
    lc = [math.log(x) for x in cand if x > 0]
    if len(lb) < 2 or len(lc) < 2 or 1.0 / math.comb(len(lb) + len(lc), len(lb)) >= alpha:
        return math.inf
    sb, sc = robust_scale(lb), robust_scale(lc)
    s = math.sqrt(((len(lb) - 1) * sb ** 2 + (len(lc) - 1) * sc ** 2) / (len(lb) + len(lc) - 2))
    delta = (_quantiles(alpha, power, len(lb) + len(lc) - 2) * math.sqrt(1 / WILCOXON_EFFICIENCY) * s
             * math.sqrt(1 / len(lb) + 1 / len(lc)))
    return _to_fraction(delta, higher_is_better)


def detectable_spread(base_half: float | None, cand_half: float | None) -> float | None:
    """Two rows' relative half-widths (a CI of the median each): the change at which their intervals part."""
    if base_half is None or cand_half is None or not (base_half >= 0 and cand_half >= 0):
        return None
    return base_half + cand_half


def rounds_to_decide(logs_scale: float, n_now: int, target: float, higher_is_better: bool, alpha: float,
                     power: float = DEFAULT_POWER, paired: bool = True) -> int | None:
    """Rounds (pairs; or samples per side when not paired) at which the detectable change reaches ``target`` (a
    fraction > 0), from the scale measured now; None when it cannot be said (no scale, no target)."""
    if not (target > 0) or not math.isfinite(logs_scale) or logs_scale <= 0:
        return None if logs_scale != 0 else n_now
    t = _to_log(target, higher_is_better)
    if not (t > 0) or math.isinf(t):
        return None
    k = _quantiles(alpha, power, None) * math.sqrt(1 / WILCOXON_EFFICIENCY) * logs_scale / t
    need = math.ceil(k * k * (1 if paired else 2))
    return max(need, n_now + 1)
