"""Power: the smallest effect a number of seeds detects, and the number of seeds an effect or an interval's
width needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import optimize
from scipy import stats as st

from ffnbench.stats.intervals import CONFIDENCE

SEEDS_CAP = 1000


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
