"""Statistics over seeds: summaries with t-intervals, paired and unpaired differences, power, verdicts.

Pure functions of plain numbers. Every interval is a two-sided 95% Student-t interval; with fewer than two
values there is no interval, and none is made up: the fields are None and every verdict is "inconclusive".

Verdict rules (one family, used by every trained claim): an interval that lies strictly on one side of a
threshold decides; an interval that touches or contains it is inconclusive; no interval is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

CONFIDENCE = 0.95
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
ONE_SEED = "one seed: no interval"
SEEDS_CAP = 1000


def _t_crit(df: float, confidence: float = CONFIDENCE) -> float:
    return float(st.t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True)
class Summary:
    """Mean over seeds, sample standard deviation (ddof=1) and the 95% t-interval of the mean."""

    n: int
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None

    @property
    def has_ci(self) -> bool:
        return self.ci_low is not None


def summarize(values: Iterable[float]) -> Summary:
    xs = np.asarray([float(v) for v in values], dtype=float)
    n = len(xs)
    if n == 0:
        return Summary(0, None, None, None, None)
    mean = float(xs.mean())
    if n < 2:
        return Summary(1, mean, None, None, None)
    std = float(xs.std(ddof=1))
    half = _t_crit(n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


@dataclass(frozen=True)
class Paired:
    """A difference b − a: its mean, the standard deviation of the per-seed differences (paired) or of the
    pooled samples (Welch, n = the smaller side), the 95% interval and the two-sided p-value of "no
    difference". `seeds` are the seeds paired on (empty for Welch)."""

    n: int
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    seeds: tuple = ()
    method: str = "paired"  # paired | welch

    @property
    def has_ci(self) -> bool:
        return self.ci_low is not None


def one_sample(diffs: Mapping) -> Paired:
    """Per-seed differences {seed: d} → their mean, 95% t-interval and the one-sample t-test against 0
    (which is exactly the paired t-test of the two samples they came from)."""
    seeds = tuple(sorted(diffs))
    s = summarize(diffs[k] for k in seeds)
    if s.n < 2:
        return Paired(s.n, s.mean, None, None, None, None, seeds)
    if s.std <= 1e-12 * max(1.0, abs(s.mean)):  # the same difference at every seed (up to rounding): a point
        return Paired(s.n, s.mean, 0.0, s.mean, s.mean, 1.0 if s.mean == 0 else 0.0, seeds)
    p = float(st.ttest_1samp([diffs[k] for k in seeds], 0.0).pvalue)
    return Paired(s.n, s.mean, s.std, s.ci_low, s.ci_high, p, seeds)


def paired(a: Mapping, b: Mapping) -> Paired:
    """b − a over the seeds both have. Same seed = same data order and same non-FFN initialisation, so the
    per-seed difference removes the seed's own luck from the comparison."""
    return one_sample({k: float(b[k]) - float(a[k]) for k in set(a) & set(b)})


def welch(a: Iterable[float], b: Iterable[float]) -> Paired:
    """Unpaired b − a (Welch's t, unequal variances), for runs that share no seeds."""
    xa, xb = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    n = min(len(xa), len(xb))
    mean = float(xb.mean() - xa.mean()) if n else None
    if n < 2:
        return Paired(n, mean, None, None, None, None, method="welch")
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = math.sqrt(va + vb)
    std = float(math.sqrt((xa.var(ddof=1) + xb.var(ddof=1)) / 2))
    if se == 0:
        return Paired(n, mean, 0.0, mean, mean, 1.0 if mean == 0 else 0.0, method="welch")
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))  # Welch–Satterthwaite
    half = _t_crit(df) * se
    p = float(st.ttest_ind(xb, xa, equal_var=False).pvalue)
    return Paired(n, mean, std, mean - half, mean + half, p, method="welch")


def compare(a: Mapping, b: Mapping) -> Paired:
    """b − a: paired by seed when at least two seeds are shared; otherwise Welch when both sides have two or
    more seeds; otherwise the paired result (n ≤ 1: no interval)."""
    common = set(a) & set(b)
    if len(common) < 2 and len(a) >= 2 and len(b) >= 2:
        return welch(a.values(), b.values())
    return paired(a, b)


# ---- power ----------------------------------------------------------------------------------------------


def minimal_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true paired difference a two-sided paired t-test at level `alpha` detects with
    probability `power`, given the per-seed differences' standard deviation: (t₁₋α/₂ + t_power)·sd/√n, both
    quantiles at n − 1 degrees of freedom. None with fewer than two seeds."""
    if n < 2 or sd is None:
        return None
    return (float(st.t.ppf(1 - alpha / 2, n - 1)) + float(st.t.ppf(power, n - 1))) * sd / math.sqrt(n)


@dataclass(frozen=True)
class SeedsNeeded:
    n: int  # the smallest n whose MDE ≤ effect, or the cap
    capped: bool  # True: even `n` seeds would not resolve the effect

    def __str__(self) -> str:
        return f"> {self.n}" if self.capped else str(self.n)


def seeds_needed(sd: float, effect: float = 0.01, alpha: float = 0.05, power: float = 0.8,
                 cap: int = SEEDS_CAP) -> SeedsNeeded:
    """The smallest number of seeds (≥ 2) whose minimal detectable effect is ≤ `effect`, up to `cap`."""
    for n in range(2, cap + 1):
        if minimal_detectable_effect(sd, n, alpha, power) <= effect:  # type: ignore[operator]
            return SeedsNeeded(n, False)
    return SeedsNeeded(cap, True)


# ---- verdicts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    verdict: str  # supported | contradicted | inconclusive
    reason: str

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, self.verdict


def _interval(x: Paired | Summary) -> tuple[float, float] | Verdict:
    if x.n < 1:
        return Verdict(INCONCLUSIVE, "no runs to compare")
    if not x.has_ci:
        return Verdict(INCONCLUSIVE, ONE_SEED)
    return x.ci_low, x.ci_high  # type: ignore[return-value]


def _fmt_ci(low: float, high: float) -> str:
    return f"[{low:+.4g}, {high:+.4g}]"


def verdict_better(result: Paired | Summary, margin: float = 0.0) -> Verdict:
    """For a difference oriented so that positive means the claim holds: supported if the 95% CI lies above
    +margin, contradicted if it lies below −margin, inconclusive otherwise (and with n < 2)."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    if low > margin:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies above {margin:g}")
    if high < -margin:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies below {(-margin or 0.0):g}")
    band = f"[{(-margin or 0.0):g}, {margin:g}]" if margin else "0"
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} {'overlaps' if margin else 'contains'} {band}")


def verdict_below(result: Paired | Summary, bound: float) -> Verdict:
    """For "the quantity is smaller than `bound`" (e.g. a cost within a practical margin): supported if the
    whole 95% CI lies below it, contradicted if the whole CI lies above it, inconclusive otherwise."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    if high < bound:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies below {bound:g}")
    if low > bound:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies above {bound:g}")
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} contains {bound:g}")


def verdict_at_least(result: Paired | Summary, bound: float) -> Verdict:
    """For "the quantity is at least `bound`": supported if the whole 95% CI is ≥ it, contradicted if the
    whole CI lies below it, inconclusive otherwise."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    if low >= bound:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} is ≥ {bound:g}")
    if high < bound:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies below {bound:g}")
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} contains {bound:g}")


def verdict_within(result: Summary, low_high: tuple[float, float], outer: tuple[float, float]) -> Verdict:
    """Supported if the 95% CI lies inside `low_high`; contradicted if it lies wholly outside `outer` (a
    wider band); inconclusive otherwise."""
    ci = _interval(result)
    if isinstance(ci, Verdict):
        return ci
    low, high = ci
    if low_high[0] <= low and high <= low_high[1]:
        return Verdict(SUPPORTED, f"95% CI {_fmt_ci(low, high)} lies within [{low_high[0]:g}, {low_high[1]:g}]")
    if high < outer[0] or low > outer[1]:
        return Verdict(CONTRADICTED, f"95% CI {_fmt_ci(low, high)} lies outside [{outer[0]:g}, {outer[1]:g}]")
    return Verdict(INCONCLUSIVE, f"95% CI {_fmt_ci(low, high)} is neither within [{low_high[0]:g}, "
                                 f"{low_high[1]:g}] nor outside [{outer[0]:g}, {outer[1]:g}]")


def combine(parts: list[tuple[str, Verdict]]) -> Verdict:
    """A claim made of several parts is their conjunction: contradicted if any part is contradicted,
    supported if every part is supported, inconclusive otherwise (including when there are no parts)."""
    if not parts:
        return Verdict(INCONCLUSIVE, "nothing to test")
    bad = [f"{label}: {v.reason}" for label, v in parts if v.verdict == CONTRADICTED]
    if bad:
        return Verdict(CONTRADICTED, "; ".join(bad))
    open_ = [f"{label}: {v.reason}" for label, v in parts if v.verdict == INCONCLUSIVE]
    if open_:
        return Verdict(INCONCLUSIVE, "; ".join(open_))
    return Verdict(SUPPORTED, "; ".join(f"{label}: {v.reason}" for label, v in parts))
