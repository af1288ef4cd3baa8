"""Statistics over seeds: summaries with t-intervals, paired and unpaired differences, a hierarchical
bootstrap over seeds and validation windows, rates with an exact test, power, verdicts and their multiplicity
correction.

Pure functions of plain numbers. Every interval is a two-sided 95% interval (Student t, or percentile for the
bootstrap); with fewer than two values there is no interval, and none is made up: the fields are None and every
verdict is "inconclusive". The same holds when every seed gives the same value or difference: a zero spread
is no estimate of the noise, so n = 2 identical seeds must not decide anything.

Verdict rules (one family, used by every trained claim): an interval that lies strictly on one side of a
threshold decides; an interval that touches or contains it is inconclusive; no interval is inconclusive. Each
verdict carries the one-sided p-value of the decision it made (from the same distribution as its interval),
so that `combine` can correct a claim's parts for multiplicity (Holm, see MULTIPLICITY).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize
from scipy import stats as st

CONFIDENCE = 0.95
FAMILY_ALPHA = 0.05  # family-wise error rate over the parts of one claim
MULTIPLICITY = f"Holm over a claim's parts, family α = {FAMILY_ALPHA:g}"
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
ONE_SEED = "one seed: no interval"
NO_SPREAD = "identical at every seed: no estimate of the noise"
SEEDS_CAP = 1000
_FLAT = 1e-12  # relative spread below which values are "the same up to rounding"


def _t_crit(df: float, confidence: float = CONFIDENCE) -> float:
    return float(st.t.ppf(0.5 + confidence / 2, df))


def _flat(spread: float, mean: float) -> bool:
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
    if _flat(s.std, s.mean):
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
    if _flat(se, mean):
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


# ---- validation sampling noise: a hierarchical bootstrap -------------------------------------------------

_BOOT_CHUNK = 1 << 22  # index draws per block when resampling windows: bounds memory for per-token windows


def _window_means(rng: np.random.Generator, windows: np.ndarray, times: int) -> np.ndarray:
    """`times` bootstrap means of one seed's windows, each resampled with replacement. A single window is
    its own mean (and draws nothing), which is what makes one window per seed a plain seed bootstrap."""
    if len(windows) == 1 or times == 0:
        return np.full(times, windows[0])
    rows = max(1, _BOOT_CHUNK // len(windows))
    return np.concatenate([windows[rng.integers(0, len(windows), size=(min(rows, times - i), len(windows)))]
                           .mean(axis=1) for i in range(0, times, rows)])


def hierarchical_bootstrap(diffs: Mapping[int, Sequence[float]], n_boot: int = 2000, seed: int = 0,
                           confidence: float = CONFIDENCE) -> Paired:
    """b − a with both sources of noise: seed to seed, and the sampling of a fixed validation set.

    Args:
        diffs: {seed: per-window loss differences b − a}, both runs of a seed scored on the same validation
            windows (so the windows pair, as the seeds do).
        n_boot: bootstrap replicates.
        seed: seed of the numpy Generator; the result is a deterministic function of it.
        confidence: coverage of the two-sided percentile interval.

    Each replicate resamples the seeds with replacement and the windows with replacement, and averages (every
    seed weighs the same). Every run is scored on the same validation windows, so seeds and windows are crossed:
    one window draw serves every chosen seed of a replicate (independent draws per seed would average a window's
    shared effect away). Seeds with different window counts fall back to independent draws per seed.
    The interval is the percentile interval of the replicate means
    (inverted-CDF quantiles, so "the interval lies above t" is exactly "fewer than 2.5% of replicates are
    ≤ t", which keeps verdict p-values consistent with it); p_value is twice the smaller tail share at 0.
    Fewer than two seeds, or replicates that are all equal (identical seeds, no window noise), give no
    interval. Caveat: with 2–3 seeds the seed level has very few distinct resamples and a percentile
    bootstrap covers less than its nominal 95% (it lacks the t distribution's heavy tails), so the result is
    the wider of the two: when the t interval over the seed means is wider, it is returned (its p-value from the
    t distribution) — the bootstrap may only widen an interval, never narrow it.
    """
    if n_boot < 2:
        raise ValueError(f"hierarchical_bootstrap: n_boot={n_boot} is too few; use at least 2 (default 2000)")
    seeds = tuple(sorted(diffs))
    windows = [np.asarray(diffs[s], dtype=float).ravel() for s in seeds]
    for s, w in zip(seeds, windows):
        if len(w) == 0:
            raise ValueError(f"hierarchical_bootstrap: seed {s} has no window differences; give at least one")
    n = len(seeds)
    means = np.array([w.mean() for w in windows])
    mean = float(means.mean()) if n else None
    if n < 2:
        return Paired(n, mean, None, None, None, None, seeds, "bootstrap")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, n, size=(n_boot, n))
    if len({len(w) for w in windows}) == 1:
        level = _crossed_means(rng, np.stack(windows), pick)
    else:
        level = np.empty((n_boot, n))
        for j, w in enumerate(windows):
            chosen = pick == j
            level[chosen] = _window_means(rng, w, int(chosen.sum()))
    boot = np.sort(level.mean(axis=1))
    std = float(means.std(ddof=1))
    if _flat(float(boot[-1] - boot[0]), mean):
        return Paired(n, mean, std, None, None, None, seeds, "bootstrap")
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2], method="inverted_cdf")
    t = one_sample(dict(zip(seeds, means.tolist())))
    if t.has_ci and t.ci_high - t.ci_low >= high - low:  # few seeds: the t interval is the honest (wider) one
        return Paired(n, mean, std, t.ci_low, t.ci_high, t.p_value, seeds, "bootstrap", se=t.se, df=t.df)
    p = min(1.0, 2 * min(float(np.mean(boot <= 0)), float(np.mean(boot >= 0))))
    return Paired(n, mean, std, float(low), float(high), p, seeds, "bootstrap", se=float(boot.std(ddof=1)),
                  boot=tuple(boot.tolist()))


def _crossed_means(rng: np.random.Generator, windows: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """Replicate × chosen-seed means when every seed has the same windows (`windows`: seeds × windows): each
    replicate draws ONE set of window indices and applies it to all of its chosen seeds."""
    n_boot, n = pick.shape
    out = np.empty((n_boot, n))
    rows = max(1, _BOOT_CHUNK // (windows.shape[0] * windows.shape[1]))
    for i in range(0, n_boot, rows):
        b = min(rows, n_boot - i)
        idx = rng.integers(0, windows.shape[1], size=(b, windows.shape[1]))
        per_seed = windows[:, idx].mean(axis=2)  # seeds × b: every seed under the replicate's window draw
        out[i:i + b] = per_seed[pick[i:i + b], np.arange(b)[:, None]]
    return out


# ---- rates (e.g. divergence) with an exact test ----------------------------------------------------------


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


# ---- power ----------------------------------------------------------------------------------------------


def _power(ncp: float, df: int, crit: float) -> float:
    """Power of the two-sided t-test with critical value `crit` when the statistic is noncentral t(df, ncp).
    The lower tail P(T < −crit) is taken as P(−T > crit) with −T ~ nct(df, −ncp): scipy's nct.cdf returns NaN
    for some large ncp at df = 1, its sf does not."""
    return float(st.nct.sf(crit, df, ncp) + st.nct.sf(crit, df, -ncp))


def minimal_detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true paired difference a two-sided paired t-test at level `alpha` detects with
    probability `power`, given the per-seed differences' standard deviation `sd`. Solved exactly: the
    noncentrality δ·√n/sd at which the noncentral t(n − 1) gives `power`. (The usual (t₁₋α/₂ + t_power)·sd/√n
    is a large-n approximation: at n = 3 its effect has power 0.77, not 0.80.) None with fewer than two
    seeds."""
    if n < 2 or sd is None:
        return None
    if not 0 < alpha < power < 1:
        raise ValueError(f"minimal_detectable_effect: need 0 < alpha < power < 1, got alpha={alpha}, power={power}")
    df = n - 1
    crit = float(st.t.ppf(1 - alpha / 2, df))
    hi = max(1.0, crit + float(st.t.ppf(power, df)))  # the approximation: a lower bound at small n
    while _power(hi, df, crit) < power:
        hi *= 2
    ncp = optimize.brentq(lambda x: _power(x, df, crit) - power, 0.0, hi, xtol=1e-13, rtol=1e-14)
    return ncp * sd / math.sqrt(n)


@dataclass(frozen=True)
class SeedsNeeded:
    n: int  # the smallest n whose MDE ≤ effect, or the cap
    capped: bool  # True: even `n` seeds would not resolve the effect

    def __str__(self) -> str:
        return f"> {self.n}" if self.capped else str(self.n)


def seeds_needed(sd: float, effect: float = 0.01, alpha: float = 0.05, power: float = 0.8,
                 cap: int = SEEDS_CAP) -> SeedsNeeded:
    """The smallest number of seeds (≥ 2) whose minimal detectable effect is ≤ `effect`, up to `cap`.
    Bisection, since the MDE falls with n (each MDE is a root-find over the noncentral t)."""
    mde = lambda n: minimal_detectable_effect(sd, n, alpha, power)
    if mde(cap) > effect:  # type: ignore[operator]
        return SeedsNeeded(cap, True)
    lo, hi = 1, cap  # invariant: lo seeds do not resolve the effect (n = 1 never does), hi seeds do
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mde(mid) <= effect else (mid, hi)  # type: ignore[operator]
    return SeedsNeeded(hi, False)


def seeds_for_halfwidth(sd: float, halfwidth: float, confidence: float = CONFIDENCE,
                        cap: int = SEEDS_CAP) -> SeedsNeeded:
    """The smallest number of seeds (≥ 2) whose two-sided t interval of a mean, t(n−1)·sd/√n, is at most
    ±`halfwidth` at this seed-to-seed SD, up to `cap` (the width falls with n: bisection)."""
    width = lambda n: float(st.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    if width(cap) > halfwidth:
        return SeedsNeeded(cap, True)
    lo, hi = 1, cap  # invariant: lo seeds give no (or too wide an) interval, hi seeds are narrow enough
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if width(mid) <= halfwidth else (mid, hi)
    return SeedsNeeded(hi, False)


# ---- verdicts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """A decision and why. `p_value` is the one-sided p-value of the decision made (for an inconclusive
    verdict: the smallest of the decisions it could have made), from the distribution its interval came
    from; None for exact or analytic parts, which `combine` does not correct. It is metadata: two verdicts
    with the same decision and reason compare equal."""

    verdict: str  # supported | contradicted | inconclusive
    reason: str
    p_value: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, self.verdict


def _interval(x: Paired | Summary) -> tuple[float, float] | Verdict:
    """The interval a rule decides on, or the inconclusive verdict that stands in for a missing one."""
    if x.n < 1:
        return Verdict(INCONCLUSIVE, "no runs to compare")
    if x.has_ci and not _flat(x.ci_high - x.ci_low, x.mean):
        return x.ci_low, x.ci_high  # type: ignore[return-value]
    if x.n >= 2 and x.std is not None:  # n ≥ 2 but no (or a point) interval: every seed agreed exactly
        return Verdict(INCONCLUSIVE, NO_SPREAD)
    return Verdict(INCONCLUSIVE, ONE_SEED)


def _p_beyond(x: Paired | Summary, threshold: float, above: bool) -> float:
    """One-sided p-value of "the true value is not above `threshold`" (above=True) or "not below it":
    small when the data say it is. From the t distribution the interval used (se, df), or for a bootstrap
    the share of replicate means on the wrong side, so that "the 95% interval excludes the threshold" and
    "p ≤ 0.025" are the same statement."""
    if x.boot:
        b = np.asarray(x.boot)
        return float(np.mean(b <= threshold) if above else np.mean(b >= threshold))
    se = x.se if x.se is not None else x.std / math.sqrt(x.n)  # type: ignore[operator]
    df = x.df if x.df is not None else x.n - 1
    t = (x.mean - threshold) / se  # type: ignore[operator]
    return float(st.t.sf(t, df) if above else st.t.cdf(t, df))


def _fmt_ci(low: float, high: float) -> str:
    return f"[{low:+.4g}, {high:+.4g}]"


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
    Fisher p, so that `combine`'s Holm step, which doubles it, compares exactly the test that decided."""
    if result.p_value is None:
        return Verdict(INCONCLUSIVE, f"no runs on side {'a' if not result.n_a else 'b'}")
    p = result.p_value
    text = f"{result.k_b}/{result.n_b} vs {result.k_a}/{result.n_a} (Fisher exact p = {p:.2g})"
    if p < alpha and result.rate_b < result.rate_a:  # type: ignore[operator]
        return Verdict(SUPPORTED, f"{text}: lower", p / 2)
    if p < alpha and result.rate_b > result.rate_a:  # type: ignore[operator]
        return Verdict(CONTRADICTED, f"{text}: higher", p / 2)
    return Verdict(INCONCLUSIVE, f"{text}: no significant difference at {alpha:g}", p / 2)


# ---- a claim made of parts ---------------------------------------------------------------------------------


def holm(parts: Sequence[tuple[str, Verdict]], alpha: float = FAMILY_ALPHA) -> list[tuple[str, Verdict]]:
    """Holm's step-down procedure over the parts that carry a p-value (m of them): sorted by p, the i-th
    (from 1) keeps its decision only if it and every smaller one pass 2·p ≤ alpha/(m − i + 1) — 2·p being
    the two-sided equivalent of the 95% interval that decided. A decision that does not survive becomes
    inconclusive, saying so. Parts without a p-value (exact, analytic, no interval) are not tested and not
    counted; with m < 2 there is nothing to correct and the parts come back unchanged."""
    tested = sorted((i for i, (_, v) in enumerate(parts) if v.p_value is not None), key=lambda i: parts[i][1].p_value)
    m, out, stop = len(tested), list(parts), None  # stop: (2p, threshold) of the part where Holm stopped
    if m < 2:
        return out
    for rank, i in enumerate(tested):
        label, v = parts[i]
        p2, need = min(1.0, 2 * v.p_value), alpha / (m - rank)  # type: ignore[operator]
        if stop is None and p2 > need:
            stop = (p2, need)
        if stop is not None and v.verdict != INCONCLUSIVE:
            why = f"needs ≤ {need:.2g}" if stop == (p2, need) else \
                f"Holm stopped at a part with p = {stop[0]:.2g} > {stop[1]:.2g}"
            out[i] = (label, Verdict(INCONCLUSIVE, f"{v.reason}, but not significant after Holm over {m} parts "
                                                   f"(p = {p2:.2g}, {why})", v.p_value))
    return out


def combine(parts: list[tuple[str, Verdict]]) -> Verdict:
    """A claim made of several parts is their conjunction, after a multiplicity correction (MULTIPLICITY:
    Holm over the parts that carry a p-value, family α = 0.05, see `holm`): without it, "contradicted if any
    part is" over four parts would contradict a true claim far more often than 5% of the time. Then:
    contradicted if any part is contradicted, supported if every part is supported, inconclusive otherwise
    (including when there are no parts)."""
    if not parts:
        return Verdict(INCONCLUSIVE, "nothing to test")
    parts = holm(parts)
    bad = [f"{label}: {v.reason}" for label, v in parts if v.verdict == CONTRADICTED]
    if bad:
        return Verdict(CONTRADICTED, "; ".join(bad))
    open_ = [f"{label}: {v.reason}" for label, v in parts if v.verdict == INCONCLUSIVE]
    if open_:
        return Verdict(INCONCLUSIVE, "; ".join(open_))
    return Verdict(SUPPORTED, "; ".join(f"{label}: {v.reason}" for label, v in parts))
