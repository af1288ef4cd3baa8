"""Rates (e.g. of divergence) compared with an exact test."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats as st

from ffnbench.stats.intervals import CONFIDENCE


@dataclass(frozen=True)
class RateDifference:
    """k events in n runs on each side (e.g. diverged runs): the rates, b − a, Fisher's exact two-sided
    p-value of "same rate" and Newcombe's hybrid-score (Wilson) 95% interval for b − a. A side with no
    runs has rate None, and then the difference, p-value and interval are None."""

    k_a: int
    n_a: int
    k_b: int
    n_b: int
    rate_a: float | None
    rate_b: float | None
    difference: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None


def _wilson(k: int, n: int, confidence: float) -> tuple[float, float]:
    ci = st.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def rate_difference(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = CONFIDENCE) -> RateDifference:
    """Compare two event rates k_a/n_a and k_b/n_b exactly (Fisher), because with a handful of runs a
    normal approximation, or a raw difference in counts, lets one run decide.

    Args:
        k_a, n_a: events and runs on side a (0 ≤ k_a ≤ n_a).
        k_b, n_b: the same on side b.
        confidence: coverage of the interval for b − a (Newcombe 1998, method 10: cheap, and it does not
            collapse to a point at 0/n the way the Wald interval does).
    """
    for side, k, n in (("a", k_a, n_a), ("b", k_b, n_b)):
        if not 0 <= k <= n:
            raise ValueError(f"rate_difference: side {side} has {k} events in {n} runs; need 0 ≤ events ≤ runs")
    rate_a, rate_b = (k_a / n_a if n_a else None), (k_b / n_b if n_b else None)
    if not (n_a and n_b):
        return RateDifference(k_a, n_a, k_b, n_b, rate_a, rate_b, None, None, None, None)
    p = float(st.fisher_exact([[k_b, n_b - k_b], [k_a, n_a - k_a]]).pvalue)
    (la, ua), (lb, ub) = _wilson(k_a, n_a, confidence), _wilson(k_b, n_b, confidence)
    d = rate_b - rate_a
    low = d - math.sqrt((rate_b - lb) ** 2 + (ua - rate_a) ** 2)
    high = d + math.sqrt((ub - rate_b) ** 2 + (rate_a - la) ** 2)
    return RateDifference(k_a, n_a, k_b, n_b, rate_a, rate_b, d, min(p, 1.0), low, high)
