"""Validation sampling noise: a hierarchical bootstrap over seeds and validation windows, for a difference b − a."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
