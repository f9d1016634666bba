"""The gate on the two halves of one interleaved server-bench run (kbench.server.interleave): paired samples.

Each case's ``<metric>_samples`` on A and on B are in round order, round i's two batches adjacent in time, so
the i-th ratio ``b_i / a_i`` is free of whatever the machine did at that moment (a neighbour, clocks): it hit both.
Per case and metric:

    change = exp(median_i log(b_i / a_i)) - 1     the paired estimate (what the table shows)
    beyond noise: one-sided Wilcoxon signed-rank test (scipy.stats.wilcoxon, exact for the few rounds kbench
                  runs) that the log ratios exceed log(1 + threshold): p < alpha. H0 is "changed by at most
                  the threshold", so an A/A pair whose rounds scatter around 1 cannot fail by chance as easily
                  as with H0 "no change". Rounds next to each other that are alike (a drift: kbench.gate.power.
                  serial_factor f > 1) count as fewer: the exact test's p, as a normal score, is divided by
                  sqrt(f), as the signed-rank sum's variance grows by f (serial_p; never smaller than the exact
                  p; on two server processes of a busy 2-core machine f is 1 to 2, on one server about 1)

and the rest of the rule is the gate's (kbench.gate.compare): regression iff worse than the threshold and beyond
noise. With n rounds the exact test cannot go below 1 / 2**n, so alpha 0.01 needs 7 rounds or more (the gate
warns below that, and such a test never finds a difference).

halves() says whether two runs are the halves of one interleaved run (manifest ``interleave``: the same id,
sides a and b): refused (BadInput) when they are but served different models or case lists; a run of an
interleaved pair gated against a run of another is compared unpaired, with a warning.
"""
from __future__ import annotations

import math
from statistics import median

from kbench.text import recorded
from kbench.errors import BadInput
from kbench.gate.stats import NoiseVerdict


def _interleave(run) -> dict | None:
    v = run.manifest.get("interleave") if run.manifest is not None else None
    return v if isinstance(v, dict) and v.get("id") and v.get("side") in ("a", "b") else None


def halves(base, cand, warnings: list[str]) -> dict | None:
    """The interleave entry of the pair when ``base`` is side A and ``cand`` side B of one interleaved run; None
    otherwise (unpaired, with a warning when either is half of an interleaved run). BadInput when they are the
    two halves but their models or case lists differ, or when the candidate is A's side."""
    ia, ib = _interleave(base), _interleave(cand)
    if ia is None and ib is None:
        return None
    if ia is None or ib is None or ia["id"] != ib["id"]:
        warnings.append("the baseline and the candidate are not the two halves of one interleaved run: compared "
                        "unpaired, between two moments (a neighbour during one run can pass for a difference); "
                        "kbench server-bench --url A --url-b B measures both in one run")
        return None
    if (ia["side"], ib["side"]) != ("a", "b"):
        raise BadInput(f"{base.path} is side {ia['side'].upper()} and {cand.path} side {ib['side'].upper()} of one "
                       f"interleaved run: give A as --baseline and B as --candidate")
    ma, mb = base.manifest.get("model"), cand.manifest.get("model")
    if ma != mb:
        raise BadInput(f"the interleaved run's A and B served different models ({recorded(ma)} vs {recorded(mb)}): "
                       f"an A/B compares "
                       f"one model with one setting changed")
    ca, cb = base.manifest.get("cases"), cand.manifest.get("cases")
    if ca != cb:
        only = sorted(set(ca or []) ^ set(cb or []))
        raise BadInput(f"the interleaved run's A and B have different case lists ({len(ca or [])} vs {len(cb or [])} "
                       f"cases; {', '.join(only[:3]) or 'another order'} differ): the halves of one run hold the same cases")
    return ia


def _rounds_of(rec: dict) -> list[int] | None:
    """The round of each of the row's batches (``sample_rounds``: an interleaved run writes it), None without."""
    raw = rec.get("sample_rounds")
    if raw is None or isinstance(raw, (str, float)):
        return None
    try:
        out = [int(x) for x in raw]
    except (TypeError, ValueError):
        return None
    return out or None


def round_pairs(rec_b: dict, rec_c: dict, metric) -> tuple[list[float], list[float], str | None]:
    """The metric's values of the rounds both halves hold, in round order: (A's, B's, None), or ([], [], why they
    do not pair). A value belongs to a round only when the row holds one value per batch: a metric absent from
    some batches (vLLM's output throughput of a batch whose tokens came in one chunk) has lost which rounds those
    were, and two sides that lack different rounds but as many of them must not be paired by position."""
    from kbench.gate.metrics import samples_of

    sides = []
    for rec, name in ((rec_b, "A"), (rec_c, "B")):
        values = samples_of(rec, metric)
        rounds = _rounds_of(rec)
        batches = len(rounds) if rounds is not None else _int(rec.get("repeats"))
        if batches is None:  # a row of an older kbench: as many batches as values
            batches = len(values)
        if len(values) != batches:
            return [], [], (f"{metric.column} is missing in some rounds ({len(values)} values of {batches} batches "
                            f"on {name}), so which rounds its values belong to is not known")
        sides.append(dict(zip(rounds if rounds is not None else range(batches), values)))
    a, b = sides
    if _rounds_of(rec_b) is None or _rounds_of(rec_c) is None:
        if len(a) != len(b):
            return [], [], f"the halves hold {len(a)} and {len(b)} rounds and do not say which"
    common = sorted(set(a) & set(b))
    return [a[r] for r in common], [b[r] for r in common], None


def _int(v) -> int | None:
    try:
        return int(v) if v is not None and v == v else None
    except (TypeError, ValueError):
        return None


def paired_change(base: list[float], cand: list[float]) -> float | None:
    """exp(median of log(cand_i / base_i)) - 1 over the rounds; None without a positive pair."""
    logs = [math.log(c / b) for b, c in zip(base, cand) if b > 0 and c > 0]
    return math.exp(median(logs)) - 1 if logs else None


def paired_verdict(base: list[float], cand: list[float], higher_is_better: bool, alpha: float,
                   direction: str, threshold: float = 0.0, factor: float | None = None) -> NoiseVerdict:
    """Is ``cand`` worse (direction="worse") or better than ``base`` by more than ``threshold``, beyond noise, round
    by round? The signed-rank test of the log ratios shifted by the threshold: H0 is a change of at most the
    threshold, not of zero, so a difference the threshold allows is never what the test finds. factor: the
    rounds' serial factor when the caller has it (else computed; the shift does not change it)."""
    from scipy.stats import wilcoxon  # imported here: scipy.stats takes most of a second to import

    cand_larger = (direction == "worse") != higher_is_better
    # the candidate larger by more than the threshold: b / a > 1 + threshold; smaller: b / a < 1 / (1 + threshold)
    shift = math.log1p(threshold) if cand_larger else -math.log1p(threshold)
    d = [math.log(c / b) - shift for b, c in zip(base, cand) if b > 0 and c > 0]
    if len(d) < 2 or not any(d):
        return NoiseVerdict("wilcoxon", False, 1.0)
    p = float(wilcoxon(d, alternative="greater" if cand_larger else "less").pvalue)
    if factor is None:
        from kbench.gate.power import serial_factor

        factor = serial_factor(d)
    p = serial_p(p, factor)
    return NoiseVerdict("wilcoxon", p < alpha, p)


def serial_p(p: float, factor: float) -> float:
    """The signed-rank test's p with the rounds counted as fewer when they drift together: its normal score divided
    by sqrt(factor), the rounds' serial factor (kbench.gate.power.serial_factor), as the sum's variance grows by
    that factor; p itself when the factor is 1 or p is not below one half (never smaller than the exact test's)."""
    from statistics import NormalDist

    if factor <= 1.0 or not 0 < p < 0.5:
        return p
    nd = NormalDist()
    return max(p, nd.cdf(nd.inv_cdf(p) / math.sqrt(factor)))


def min_rounds(alpha: float) -> int:
    """The fewest rounds with which the exact one-sided signed-rank test can give p < alpha (its smallest p, every
    ratio one way, is 1 / 2**n): 7 for alpha 0.01."""
    if not alpha > 0:
        return 10 ** 9  # no number of rounds reaches it
    return max(2, math.floor(-math.log2(alpha)) + 1)
