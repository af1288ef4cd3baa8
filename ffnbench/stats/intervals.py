"""Summaries over seeds and differences between two sets of runs, with Student-t intervals.

Every interval is a two-sided 95% interval; with fewer than two values there is no interval, and none is made
up: the fields are None. The same holds when every seed gives the same difference: a zero spread is no estimate
of the noise (`is_flat`), so n = 2 identical seeds must not decide anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import special
from scipy import stats as st

CONFIDENCE = 0.95
_FLAT = 1e-12  # relative spread below which values are "the same up to rounding"


def _t_crit(df: float, confidence: float = CONFIDENCE) -> float:
    return float(st.t.ppf(0.5 + confidence / 2, df))


def is_flat(spread: float, mean: float) -> bool:
    """True when a standard deviation (or error) is zero up to floating-point rounding of the mean."""
    return spread <= _FLAT * max(1.0, abs(mean))


@dataclass(frozen=True)
class Summary:
    """Mean over seeds, sample standard deviation (ddof=1) and the 95% t-interval of the mean. The interval
    is descriptive even when every value is the same (a point); the verdict rules treat that as no noise
    estimate and say inconclusive."""

    n: int
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None

    @property
    def has_ci(self) -> bool:
        return self.ci_low is not None

    @property
    def se(self) -> float | None:
        """Standard error of the mean (what the t-interval is built on)."""
        return None if self.std is None else self.std / math.sqrt(self.n)

    @property
    def df(self) -> float | None:
        return self.n - 1 if self.n >= 2 else None

    @property
    def boot(self) -> tuple:
        return ()


@dataclass(frozen=True)
class FractionSummary(Summary):
    """A Summary of fractions whose interval stays in [0, 1]: `boot` holds the draws it came from (the verdict
    rules read their p-values off them, so interval and p-value agree)."""

    draws: tuple = field(default=(), repr=False, compare=False)

    @property
    def boot(self) -> tuple:
        return self.draws


FRACTION_EPS = 1e-4  # a per-seed fraction of exactly 0 or 1 is read as this far inside, so its logit is finite
FRACTION_DRAWS = 4000


def summarize_fraction(values: Iterable[float], seed: int = 0) -> Summary:
    """Mean fraction over seeds with a 95% interval inside [0, 1]: the t interval of the per-seed logits (t's tails
    for few seeds), carried back through the logistic function by drawing the logit mean from its t distribution.
    The mean is the plain mean of the fractions. Fewer than two values, or one value at every seed: as summarize."""
    xs = np.asarray([float(v) for v in values], dtype=float)
    plain = summarize(xs)
    if plain.n < 2 or plain.std is None or is_flat(plain.std, plain.mean):
        return plain
    z = np.log(np.clip(xs, FRACTION_EPS, 1 - FRACTION_EPS) / (1 - np.clip(xs, FRACTION_EPS, 1 - FRACTION_EPS)))
    n = len(z)
    se = float(z.std(ddof=1)) / math.sqrt(n)
    t = np.random.default_rng(seed).standard_t(n - 1, FRACTION_DRAWS)
    # expit is the logistic 1 / (1 + e^-x) evaluated without forming e^-x for very negative x: with one or two
    # degrees of freedom the t draws reach logits far beyond -709, where exp overflows
    draws = np.sort(special.expit(float(z.mean()) + se * t))
    low, high = np.quantile(draws, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2], method="inverted_cdf")
    return FractionSummary(n, plain.mean, plain.std, float(low), float(high), tuple(draws.tolist()))


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
    """A difference b − a: its mean, the standard deviation of the per-seed differences (paired, bootstrap:
    of the per-seed means) or of the pooled samples (Welch, n = the smaller side), the 95% interval and the
    two-sided p-value of "no difference". `seeds` are the seeds paired on (empty for Welch). `se` and `df`
    are the standard error and degrees of freedom the t-interval was built on (None for the bootstrap);
    `boot` holds the sorted bootstrap means (bootstrap only), so that a verdict's p-value comes from the
    same distribution as the interval. No interval (has_ci False) with n < 2 or a zero spread."""

    n: int
    mean: float | None
    std: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    seeds: tuple = ()
    method: str = "paired"  # paired | welch | bootstrap
    se: float | None = None
    df: float | None = None
    boot: tuple = field(default=(), repr=False, compare=False)
    # the interval this one was widened to contain (stats.bootstrap.hull): a verdict's one-sided p-value is the
    # larger of the two distributions', so widening never makes a decision look stronger than either shows
    within: Paired | None = field(default=None, repr=False, compare=False)
    # the nested bootstrap's share of resamples that chose the estimate's own lrs again (stats.bootstrap)
    kept: float | None = field(default=None, repr=False, compare=False)

    @property
    def has_ci(self) -> bool:
        return self.ci_low is not None


def one_sample(diffs: Mapping) -> Paired:
    """Per-seed differences {seed: d} → their mean, 95% t-interval and the one-sample t-test against 0
    (which is exactly the paired t-test of the two samples they came from). The same difference at every
    seed gives no interval and no p-value: a zero standard deviation says nothing about the noise."""
    seeds = tuple(sorted(diffs))
    s = summarize(diffs[k] for k in seeds)
    if s.n < 2:
        return Paired(s.n, s.mean, None, None, None, None, seeds)
    if is_flat(s.std, s.mean):
        return Paired(s.n, s.mean, 0.0, None, None, None, seeds)
    p = float(st.ttest_1samp([diffs[k] for k in seeds], 0.0).pvalue)
    return Paired(s.n, s.mean, s.std, s.ci_low, s.ci_high, p, seeds, se=s.se, df=s.df)


def paired(a: Mapping, b: Mapping) -> Paired:
    """b − a over the seeds both have. Same seed = same data order and same non-FFN initialisation, so the
    per-seed difference removes the seed's own luck from the comparison."""
    return one_sample({k: float(b[k]) - float(a[k]) for k in set(a) & set(b)})


def welch(a: Iterable[float], b: Iterable[float]) -> Paired:
    """Unpaired b − a (Welch's t, unequal variances), for runs that share no seeds. Both sides constant
    (standard error 0) gives no interval and no p-value, as in `one_sample`."""
    xa, xb = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    n = min(len(xa), len(xb))
    mean = float(xb.mean() - xa.mean()) if n else None
    if n < 2:
        return Paired(n, mean, None, None, None, None, method="welch")
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = math.sqrt(va + vb)
    std = float(math.sqrt((xa.var(ddof=1) + xb.var(ddof=1)) / 2))
    if is_flat(se, mean):
        return Paired(n, mean, 0.0, None, None, None, method="welch")
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))  # Welch–Satterthwaite
    half = _t_crit(df) * se
    p = float(st.ttest_ind(xb, xa, equal_var=False).pvalue)
    return Paired(n, mean, std, mean - half, mean + half, p, method="welch", se=se, df=float(df))


def compare(a: Mapping, b: Mapping) -> Paired:
    """b − a: paired by seed when at least two seeds are shared; otherwise Welch when both sides have two or
    more seeds; otherwise the paired result (n ≤ 1: no interval)."""
    common = set(a) & set(b)
    if len(common) < 2 and len(a) >= 2 and len(b) >= 2:
        return welch(a.values(), b.values())
    return paired(a, b)
