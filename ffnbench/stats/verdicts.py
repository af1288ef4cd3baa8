"""Verdicts: an interval (or an exact test) against a threshold → supported, contradicted or inconclusive.

An interval that lies strictly on one side of a threshold decides; an interval that touches or contains it is
inconclusive; no interval (one seed), or a point interval (every seed agreed exactly: no estimate of the noise),
is inconclusive. Each verdict carries the one-sided p-value of the decision it made (from the same distribution
as its interval), so that a claim's parts can be corrected for multiplicity (ffnbench.stats.multiplicity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as st

from ffnbench.stats.intervals import CONFIDENCE, Paired, Summary, is_flat
from ffnbench.stats.rates import RateDifference

SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
ONE_SEED = "one seed: no interval"
NO_SPREAD = "identical at every seed: no estimate of the noise"


@dataclass(frozen=True)
class Verdict:
    """A decision and why. `p_value` is the one-sided p-value of the decision made (for an inconclusive
    verdict: the smallest of the decisions it could have made), from the distribution its interval came
    from; None for exact or analytic parts, which `multiplicity.combine` does not correct. It is metadata:
    two verdicts with the same decision and reason compare equal."""

    verdict: str  # supported | contradicted | inconclusive
    reason: str
    p_value: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, self.verdict


def _interval(x: Paired | Summary) -> tuple[float, float] | Verdict:
    """The interval a rule decides on, or the inconclusive verdict that stands in for a missing one."""
    if x.n < 1:
        return Verdict(INCONCLUSIVE, "no runs to compare")
    if x.has_ci and not is_flat(x.ci_high - x.ci_low, x.mean):
        return x.ci_low, x.ci_high  # type: ignore[return-value]
    if x.n >= 2 and x.std is not None:  # n ≥ 2 but no (or a point) interval: every seed agreed exactly
        return Verdict(INCONCLUSIVE, NO_SPREAD)
    return Verdict(INCONCLUSIVE, ONE_SEED)


def _p_beyond(x: Paired | Summary, threshold: float, above: bool) -> float:
    """One-sided p-value of "the true value is not above `threshold`" (above=True) or "not below it":
    small when the data say it is. From the t distribution the interval used (se, df), or for a bootstrap
    the share of replicate means on the wrong side, so that "the 95% interval excludes the threshold" and
    "p < 0.025" are the same statement (with exactly 2.5% of the replicates on the wrong side, the inverted-CDF
    interval ends on one of them: p = 0.025 excludes nothing). A bootstrap's p is at least 1/(B + 1) (B replicates:
    none on the wrong side says p < 1/B, not 0, which would pass any multiplicity correction); an interval widened
    to contain another (Paired.within) takes the larger of the two p-values."""
    if x.boot:
        b = np.asarray(x.boot)
        p = max(float(np.mean(b <= threshold) if above else np.mean(b >= threshold)), 1.0 / (len(b) + 1))
    else:
        se = x.se if x.se is not None else x.std / math.sqrt(x.n)  # type: ignore[operator]
        df = x.df if x.df is not None else x.n - 1
        t = (x.mean - threshold) / se  # type: ignore[operator]
        p = float(st.t.sf(t, df) if above else st.t.cdf(t, df))
    within = getattr(x, "within", None)
    return p if within is None or not within.has_ci else max(p, _p_beyond(within, threshold, above))


def _fmt_ci(low: float, high: float) -> str:
    return f"[{low:+.4f}, {high:+.4f}]"  # as claims.formatting.fmt_ci writes every interval


def verdict_better(result: Paired | Summary, margin: float = 0.0) -> Verdict:
    """For a difference oriented so that positive means the claim holds: supported if the 95% CI lies above
    +margin, contradicted if it lies below −margin, inconclusive otherwise (and with n < 2 or no spread).
    p_value: the one-sided test against +margin (supported) or −margin (contradicted)."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    p_up, p_down = _p_beyond(result, margin, True), _p_beyond(result, -margin, False)
    if low > margin:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies above {margin:g}", p_up)
    if high < -margin:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies below {(-margin or 0.0):g}", p_down)
    band = f"[{(-margin or 0.0):g}, {margin:g}]" if margin else "0"
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} {'overlaps' if margin else 'contains'} {band}",
                   min(p_up, p_down))


EQUIVALENT = "equivalent within ±"  # how an equivalence outcome's reason starts: "equivalent within ±0.01: ..."
NO_GAIN = "no gain as large as "  # a CI below +m that reaches −m or below, not below 0: "no gain as large as 0.01: ..."


def verdict_beats(result: Paired | Summary, margin: float) -> Verdict:
    """For "A beats B" read on Δ = loss(B) − loss(A), with a pre-registered margin m of practical relevance
    (docs/claims.md, the outcome table; DESIGN §9). Contradicted when the 95% CI's upper end lies below +m: no gain
    as large as m at this scale (inside (−m, +m): equivalent within ±m; wholly below 0: B is better; else: no
    relevant gain, whatever the sign). Otherwise supported when it lies above 0 (the reason says when its lower end
    is below +m: a gain, its relevance not shown), inconclusive when it contains 0 (and reaches +m). Monotone: an
    interval further below never reads less contradicted."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    if high < margin:  # one decision, one test (Δ < m), whichever row its reason names: monotone under Holm too
        p_below = _p_beyond(result, margin, False)
        if low > -margin:
            return Verdict(CONTRADICTED, f"{EQUIVALENT}{margin:.3g}: 95% CI {_fmt_ci(low, high)} lies inside "
                                         f"(−{margin:.3g}, +{margin:.3g}): no gain larger than {margin:.3g} at this "
                                         "scale", p_below)
        if high < 0:
            return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies below 0", p_below)
        return Verdict(CONTRADICTED, f"{NO_GAIN}{margin:.3g}: 95% CI {_fmt_ci(low, high)} lies below +{margin:.3g}",
                       p_below)
    p_up, p_down = _p_beyond(result, 0.0, True), _p_beyond(result, margin, False)
    if low > 0:
        small = f" (its lower end below the margin {margin:.3g}: a gain, its relevance not shown)" if low < margin \
            else ""
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies above 0{small}", p_up)
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} contains 0 and reaches +{margin:.3g}",
                   min(p_up, p_down))


def verdict_below(result: Paired | Summary, bound: float) -> Verdict:
    """For "the quantity is smaller than `bound`" (e.g. a cost within a practical margin): supported if the
    whole 95% CI lies below it, contradicted if the whole CI lies above it, inconclusive otherwise.
    p_value: the one-sided test against `bound` in the direction decided."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    p_below, p_above = _p_beyond(result, bound, False), _p_beyond(result, bound, True)
    if high < bound:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies below {bound:g}", p_below)
    if low > bound:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies above {bound:g}", p_above)
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} contains {bound:g}", min(p_below, p_above))


def verdict_at_least(result: Paired | Summary, bound: float) -> Verdict:
    """For "the quantity is at least `bound`": supported if the whole 95% CI is ≥ it, contradicted if the
    whole CI lies below it, inconclusive otherwise. p_value: the one-sided test against `bound`."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    p_above, p_below = _p_beyond(result, bound, True), _p_beyond(result, bound, False)
    if low >= bound:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} is ≥ {bound:g}", p_above)
    if high < bound:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies below {bound:g}", p_below)
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} contains {bound:g}", min(p_above, p_below))


def verdict_within(result: Summary, low_high: tuple[float, float], outer: tuple[float, float]) -> Verdict:
    """Supported if the 95% CI lies inside `low_high`; contradicted if it lies wholly outside `outer` (a
    wider band); inconclusive otherwise. p_value: supported, the larger of the two one-sided tests against
    the band's ends (an equivalence test, TOST); contradicted, the test against the outer end passed."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    p_in = max(_p_beyond(result, low_high[0], True), _p_beyond(result, low_high[1], False))
    p_under, p_over = _p_beyond(result, outer[0], False), _p_beyond(result, outer[1], True)
    if low_high[0] <= low and high <= low_high[1]:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies within [{low_high[0]:g}, {low_high[1]:g}]",
                       p_in)
    if high < outer[0] or low > outer[1]:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies outside [{outer[0]:g}, {outer[1]:g}]",
                       p_under if high < outer[0] else p_over)
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} is neither within [{low_high[0]:g}, "
                                 f"{low_high[1]:g}] nor outside [{outer[0]:g}, {outer[1]:g}]",
                   min(p_in, p_under, p_over))


def verdict_rate_lower(result: RateDifference, alpha: float = 1 - CONFIDENCE) -> Verdict:
    """For "side b has the event (e.g. diverges) less often than side a", on Fisher's exact test: supported
    if p < alpha and b's rate is lower, contradicted if p < alpha and b's rate is higher, inconclusive
    otherwise, so a single run's difference (0/3 vs 1/3, p = 1) never decides. p_value: half the two-sided
    Fisher p, so that `multiplicity.combine`'s Holm step, which doubles it, compares exactly the test that
    decided."""
    if result.p_value is None:
        return Verdict(INCONCLUSIVE, f"no runs on side {'a' if not result.n_a else 'b'}")
    p = result.p_value
    text = f"{result.k_b}/{result.n_b} vs {result.k_a}/{result.n_a} (Fisher exact p = {p:.2g})"
    if p < alpha and result.rate_b < result.rate_a:  # type: ignore[operator]
        return Verdict(SUPPORTED, f"{text}: lower", p / 2)
    if p < alpha and result.rate_b > result.rate_a:  # type: ignore[operator]
        return Verdict(CONTRADICTED, f"{text}: higher", p / 2)
    return Verdict(INCONCLUSIVE, f"{text}: no significant difference at {alpha:g}", p / 2)
