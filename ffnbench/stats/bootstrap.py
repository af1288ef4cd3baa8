"""Validation sampling noise: a hierarchical bootstrap over seeds and validation windows, for a difference b − a."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ffnbench.stats.intervals import CONFIDENCE, Paired, is_flat, one_sample

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
    if is_flat(float(boot[-1] - boot[0]), mean):
        return Paired(n, mean, std, None, None, None, seeds, "bootstrap")
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2], method="inverted_cdf")
    t = one_sample(dict(zip(seeds, means.tolist())))
    if t.has_ci and t.ci_high - t.ci_low >= high - low:  # few seeds: the t interval is the honest (wider) one
        return Paired(n, mean, std, t.ci_low, t.ci_high, t.p_value, seeds, "bootstrap", se=t.se, df=t.df)
    p = _two_sided_p(boot)
    return Paired(n, mean, std, float(low), float(high), p, seeds, "bootstrap", se=float(boot.std(ddof=1)),
                  boot=tuple(boot.tolist()))


def _two_sided_p(boot: np.ndarray) -> float:
    """Twice the smaller tail share of the replicates at 0, each tail at least 1/(B + 1) (as a verdict's one-sided p:
    stats.verdicts._p_beyond): no replicate beyond 0 says p < 2/B, not 0."""
    return min(1.0, 2 * max(min(float(np.mean(boot <= 0)), float(np.mean(boot >= 0))), 1 / (len(boot) + 1)))


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


LrLosses = Mapping[float, Mapping[int, float]]  # {lr: {tuning seed: final loss, +inf for a diverged seed}}
LrWindows = Mapping[float, Mapping[int, Sequence[float]]]  # {lr: {judged seed: per-window validation losses}}


def _choose(losses: LrLosses, drawn: Sequence[int]) -> float | None:
    """The lr with the lowest median over the drawn tuning seeds (a seed drawn twice counts twice; +inf for a
    diverged one), ties to the smaller lr: lr_protocol.best_lr's rule on a resample. None: no finite median."""
    best: tuple[float, float] | None = None
    for lr in sorted(losses):
        values = [losses[lr][s] for s in drawn if s in losses[lr]]
        if not values:
            continue
        m = float(np.median(values))
        if np.isfinite(m) and (best is None or m < best[0]):
            best = (m, lr)
    return None if best is None else best[1]


@dataclass(frozen=True)
class NestedSide:
    """One tuned side of a contrast: its tuning losses, its judged runs' windows at each judged lr (finished runs),
    the lr it chose on all tuning seeds, its weight in the contrast (b − a: a −1, b +1), and the judged seeds that
    diverged at each lr."""

    tuning: LrLosses
    judged: LrWindows
    chosen: float
    weight: float
    diverged: Mapping[float, frozenset[int]] = field(default_factory=dict)


def nested_lr_contrast(sides: Sequence[NestedSide], n_boot: int = 2000, seed: int = 0,
                       confidence: float = CONFIDENCE) -> Paired | None:
    """Σ weight · loss over tuned sides, with every side's lr choice inside the interval: b − a (a −1, b +1), or C8's
    depth interaction, (b − a) at one depth minus (b − a) at the other. Each replicate resamples the tuning seeds
    (one draw for every side: they share them), chooses each side's lr again among its judged lrs (the lowest median
    tuning loss, as lr_protocol.best_lr), then resamples the judged seeds all sides ran at those lrs, and one set of
    validation windows for all of them (as hierarchical_bootstrap). The estimate is the contrast at each side's
    `chosen` lr (its choice on all tuning seeds).

    A choice that one tuning seed can flip moves replicates to another combination of lrs, and widens the interval
    by what the contrast differs there; a choice that never moves gives the judged-only interval (up to
    resampling). A combination of lrs other than the chosen one where a seed every side ran diverged on some sides
    only has no contrast: its surviving seeds would read the diverging side better than it ran (DESIGN §9: a
    failed run is its variant's failure); a seed that diverged on every side drops out, as in a paired comparison.
    A replicate that chooses a combination without a contrast (or with fewer than two judged seeds in common) takes
    the chosen lrs' draw instead; where more than a tail's share of replicates (2.5%) do, the interval could not
    show what they stand for, and the result is None. At the chosen lrs, divergences are the divergence rule's
    (claims.pairing): the contrast reads the seeds every side finished. None when those are fewer than two."""
    lrs = [[lr for lr in side.tuning if lr in side.judged] for side in sides]
    chosen = tuple(side.chosen for side in sides)
    combos: dict[tuple[float, ...], tuple[tuple[int, ...], np.ndarray] | None] = {}

    def one_sided(pick: tuple[float, ...]) -> bool:
        """Whether a seed every side ran at its lr of `pick` diverged on some sides only."""
        ran = [set(side.judged[lr]) | set(side.diverged.get(lr, ())) for lr, side in zip(pick, sides)]
        flags = [[s in side.diverged.get(lr, ()) for lr, side in zip(pick, sides)] for s in set.intersection(*ran)]
        return any(any(f) and not all(f) for f in flags)

    def contrast(pick: tuple[float, ...]) -> tuple[tuple[int, ...], np.ndarray] | None:
        """The seeds every side ran at its lr of `pick`, and their weighted sums of windows (seeds × windows)."""
        if pick not in combos:
            combos[pick] = None
            if all(lr in side.judged for lr, side in zip(pick, sides)) and (pick == chosen or not one_sided(pick)):
                shared = tuple(sorted(set.intersection(*(set(side.judged[lr]) for lr, side in zip(pick, sides)))))
                lengths = {len(side.judged[lr][s]) for s in shared for lr, side in zip(pick, sides)}
                if len(shared) >= 2 and len(lengths) == 1:  # every run scored on the same windows
                    rows = []
                    for s in shared:
                        row = np.zeros(1)
                        for lr, side in zip(pick, sides):
                            row = row + side.weight * np.asarray(side.judged[lr][s], float)
                        rows.append(row)
                    combos[pick] = (shared, np.stack(rows))
        return combos[pick]

    if contrast(chosen) is None:
        return None
    seeds_t = sorted({s for side in sides for at in side.tuning.values() for s in at})
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    unformed = 0  # replicates whose lrs have no contrast (a seed diverged there on one side only, or too few shared)
    kept = 0  # replicates that chose the estimate's own lrs again
    for i in range(n_boot):
        drawn = [seeds_t[j] for j in rng.integers(0, len(seeds_t), len(seeds_t))] if seeds_t else []
        pick = tuple(_choose({lr: side.tuning[lr] for lr in side_lrs}, drawn) or side.chosen
                     for side, side_lrs in zip(sides, lrs))
        unformed += contrast(pick) is None
        kept += pick == chosen
        shared, rows = contrast(pick) or contrast(chosen)
        picked = rows[rng.integers(0, len(shared), len(shared))]
        windows = rng.integers(0, rows.shape[1], rows.shape[1]) if rows.shape[1] > 1 else np.zeros(1, int)
        boot[i] = picked[:, windows].mean()
    if unformed > n_boot * (1 - confidence) / 2:  # enough to be a tail of their own: the interval cannot stand in
        return None  # for them (the lr is then checked on the tuning seeds, and says so)
    boot.sort()
    shared, rows = contrast(chosen)
    means = rows.mean(axis=1)
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2], method="inverted_cdf")
    p = _two_sided_p(boot)
    return Paired(len(shared), float(means.mean()), float(means.std(ddof=1)), float(low), float(high), p, shared,
                  "nested bootstrap", se=float(boot.std(ddof=1)), boot=tuple(boot.tolist()), kept=kept / n_boot)


def hull(nested: Paired, judged: Paired) -> Paired:
    """The nested interval widened to contain the judged-only one: resampling the lr choice may only add
    uncertainty, never remove what the judged seeds alone show (its p-values the larger of the two: Paired.within)."""
    if not judged.has_ci or not nested.has_ci:
        return nested
    low, high = min(nested.ci_low, judged.ci_low), max(nested.ci_high, judged.ci_high)
    if (low, high) == (nested.ci_low, nested.ci_high):
        return nested
    # the wider interval's bounds with replicates that reproduce them: the verdicts read p-values off `boot`, so
    # the replicates are shifted out to the hull's ends at both tails
    boot = np.asarray(nested.boot)
    boot = np.where(boot <= nested.ci_low, boot - (nested.ci_low - low), boot)
    boot = np.where(boot >= nested.ci_high, boot + (high - nested.ci_high), boot)
    return Paired(nested.n, nested.mean, nested.std, low, high, max(nested.p_value or 0, judged.p_value or 0),
                  nested.seeds, nested.method, se=nested.se, boot=tuple(np.sort(boot).tolist()), within=judged,
                  kept=nested.kept)
