"""ffnbench.stats.bootstrap: the hierarchical bootstrap over seeds and validation windows, against the
t interval over the seed means it may only widen."""

import math

import numpy as np
import pytest

from ffnbench.stats.bootstrap import hierarchical_bootstrap
from ffnbench.stats.intervals import one_sample
from ffnbench.stats.verdicts import INCONCLUSIVE, NO_SPREAD, ONE_SEED, SUPPORTED, Verdict, verdict_below, verdict_better


def test_bootstrap_without_any_noise_has_no_interval():
    p = hierarchical_bootstrap({0: [0.1, 0.1, 0.1], 1: [0.1, 0.1, 0.1], 2: [0.1] * 3})
    assert (p.method, p.n, p.mean, p.has_ci, p.p_value) == ("bootstrap", 3, pytest.approx(0.1), False, None)
    assert verdict_better(p) == Verdict(INCONCLUSIVE, NO_SPREAD)
    one = hierarchical_bootstrap({0: [0.1, 0.3, -0.2, 0.5]})  # one seed, many windows: still no interval
    assert (one.n, one.mean, one.has_ci) == (1, pytest.approx(0.175), False)
    assert verdict_better(one).reason == ONE_SEED


def test_window_noise_widens_the_interval_beyond_the_t_interval_over_seed_means():
    seed_means = {0: 0.050, 1: 0.052, 2: 0.049, 3: 0.051, 4: 0.050}
    noise = [0.3, -0.3, 0.2, -0.2, 0.1, -0.1, 0.0, 0.0]  # mean 0: each seed's window mean is exactly its target
    windows = {s: [m + e for e in noise] for s, m in seed_means.items()}
    seeds_only = one_sample(seed_means)
    both = hierarchical_bootstrap(windows, seed=1)
    assert both.mean == pytest.approx(seeds_only.mean)
    assert verdict_better(seeds_only).verdict == SUPPORTED  # the seeds alone look decisive
    assert both.ci_high - both.ci_low > 5 * (seeds_only.ci_high - seeds_only.ci_low)
    verdict = verdict_better(both)
    assert verdict.verdict == INCONCLUSIVE and verdict.p_value > 0.025


def test_bootstrap_with_one_window_per_seed_is_a_seed_bootstrap_widened_to_the_t_interval():
    """One window per seed leaves only seed noise: the replicates are a plain seed bootstrap, and with five
    seeds its percentile interval is narrower than the t interval over the seeds, which is then returned."""
    values = [0.10, 0.12, 0.11, 0.09, 0.13]
    p = hierarchical_bootstrap({s: [v] for s, v in enumerate(values)}, n_boot=500, seed=3)
    pick = np.random.default_rng(3).integers(0, 5, size=(500, 5))
    boot = np.sort(np.asarray(values)[pick].mean(axis=1))
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    t = one_sample(dict(enumerate(values)))
    assert t.ci_high - t.ci_low > high - low
    assert (p.ci_low, p.ci_high, p.p_value) == (t.ci_low, t.ci_high, t.p_value) and p.method == "bootstrap"
    assert p.std == pytest.approx(np.std(values, ddof=1))
    assert verdict_better(p).verdict == SUPPORTED


def test_bootstrap_is_reproducible_for_a_seed():
    rng = np.random.default_rng(7)
    shared = rng.normal(0.0, 0.2, size=16)  # a strong shared window effect: the bootstrap is the wider interval
    windows = {s: list(0.01 + shared + rng.normal(0, 0.01, size=16)) for s in range(8)}
    first, again = hierarchical_bootstrap(windows, seed=5), hierarchical_bootstrap(windows, seed=5)
    assert first == again and first.boot == again.boot
    assert hierarchical_bootstrap(windows, seed=6).ci_low != first.ci_low
    with pytest.raises(ValueError, match="seed 2 has no window differences"):
        hierarchical_bootstrap({0: [0.1], 2: []})


def test_bootstrap_with_two_seeds_is_never_narrower_than_the_t_interval_over_seed_means():
    """Two seeds give a percentile bootstrap only three seed resamples: about [smaller mean, larger mean]. The
    t interval at n = 2 is mean ± 12.7·se; the bootstrap adds window noise and may not narrow that."""
    rng = np.random.default_rng(0)
    diffs = {0: 0.000 + rng.normal(0, 0.02, 2000), 1: 0.012 + rng.normal(0, 0.02, 2000)}
    boot = hierarchical_bootstrap(diffs)
    t = one_sample({s: float(np.mean(w)) for s, w in diffs.items()})
    assert boot.ci_low <= t.ci_low and boot.ci_high >= t.ci_high
    assert verdict_below(boot, 0.015).verdict == INCONCLUSIVE  # a 0.015 margin is not shown by 2 seeds


def test_bootstrap_draws_the_same_windows_for_every_seed():
    """Every run is scored on the same windows: a window's shared effect must stay in the interval (drawing
    windows independently per seed would average it away by a factor of √n_seeds)."""
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.3, 1000)
    shared -= shared.mean()
    diffs = {s: m + shared + rng.normal(0, 0.01, 1000) for s, m in zip(range(3), (0.0025, 0.003, 0.0035))}
    boot = hierarchical_bootstrap(diffs)
    window_se = float(np.std(shared, ddof=1) / math.sqrt(1000))  # the shared windows' own sampling error
    assert boot.ci_high - boot.ci_low > 3.0 * window_se  # ≈ 2·1.96·se when the shared effect is kept
    assert verdict_below(boot, 0.015).verdict == INCONCLUSIVE


def _side(best: float, other: float, judged: dict[float, float], weight: float, tie: bool = False):
    """A tuned side over lrs 1 and 2 on tuning seeds 100-102: lr 1 best (by far, or by one seed's vote: `tie`), judged
    on seeds 0-5 at both lrs with loss judged[lr] + a per-seed wiggle (one window a seed)."""
    from ffnbench.stats.bootstrap import NestedSide

    tuning = {1.0: {100: best, 101: best, 102: best},
              2.0: ({100: best - 0.01, 101: best + 0.001, 102: best + 0.002} if tie
                    else {s: other for s in (100, 101, 102)})}
    windows = {lr: {s: [loss + 0.001 * ((s * 7) % 5)] for s in range(6)} for lr, loss in judged.items()}
    return NestedSide(tuning, windows, 1.0, weight)


def test_nested_contrast_is_the_judged_interval_when_no_choice_moves_and_widens_when_one_can():
    from ffnbench.stats.bootstrap import nested_lr_contrast

    a = _side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, -1.0)
    b = _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0)
    fixed = nested_lr_contrast([a, b])
    # every replicate chooses lr 1 for both: b − a = 0.1 at every seed, and its interval is the seeds' (none: no spread)
    assert fixed.mean == pytest.approx(0.1) and fixed.n == 6
    assert fixed.ci_low == pytest.approx(0.1) and fixed.ci_high == pytest.approx(0.1)
    # b's choice flips to lr 2 whenever tuning seed 100 is drawn twice or more: b − a = −0.1 there
    moving = nested_lr_contrast([a, _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0, tie=True)])
    assert moving.mean == pytest.approx(0.1)  # the estimate stays at the chosen lrs
    assert moving.ci_low == pytest.approx(-0.1) and moving.ci_high == pytest.approx(0.1)
    assert 0.1 < np.mean(np.asarray(moving.boot) < 0) < 0.6  # P(seed 100 drawn ≥ 2 of 3 times) = 7/27
    assert nested_lr_contrast([a, b]).boot == fixed.boot  # reproducible


def test_nested_contrast_of_four_sides_is_the_interaction_of_two_differences():
    from ffnbench.stats.bootstrap import nested_lr_contrast

    shallow = [_side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, 1.0), _side(3.1, 3.6, {1.0: 3.05, 2.0: 2.9}, -1.0)]
    deep = [_side(2.9, 3.5, {1.0: 2.9, 2.0: 3.2}, -1.0), _side(3.0, 3.6, {1.0: 3.0, 2.0: 2.9}, 1.0)]
    interaction = nested_lr_contrast([*shallow, *deep])
    # (b − a) deep − (b − a) shallow at the chosen lrs: 0.1 − 0.05, the wiggles cancelling seed by seed
    assert interaction.mean == pytest.approx(0.05) and interaction.n == 6
    from dataclasses import replace

    assert nested_lr_contrast([shallow[0], replace(shallow[1], judged={1.0: {0: [3.0]}})]) is None  # one shared seed


def test_nested_contrast_gives_no_interval_when_a_tail_of_replicates_chooses_an_lr_without_a_contrast():
    """b's choice moves to lr 2 in 7/27 of replicates (tuning seed 100 drawn twice or more); when lr 2 has one judged
    seed, or none (its judged runs there all diverged), those replicates have no contrast: the interval cannot stand in
    for them (it used to take the chosen lrs' draw: [+0.1, +0.1], the lr choice gone)."""
    from dataclasses import replace

    from ffnbench.stats.bootstrap import nested_lr_contrast

    a = _side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, -1.0)
    b = _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0, tie=True)
    assert nested_lr_contrast([a, b]) is not None
    one_seed = replace(b, judged={**b.judged, 2.0: {0: b.judged[2.0][0]}})
    assert nested_lr_contrast([a, one_seed]) is None
    diverged = replace(b, judged={**b.judged, 2.0: {}})
    assert nested_lr_contrast([a, diverged]) is None
    # a choice that never moves there keeps its interval whatever lr 2 holds
    fixed = _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0)
    assert nested_lr_contrast([a, replace(fixed, judged={**fixed.judged, 2.0: {}})]) is not None


def test_a_seed_that_diverged_on_one_side_at_a_resampled_lr_leaves_no_contrast_there_one_on_both_drops_out():
    """b moves to lr 2 in 7/27 of replicates. Seeds 0 and 1 of b diverged there while a finished them: the survivors
    alone would read b better than it ran, so those replicates have no contrast and the interval is withheld. A seed
    only b ran (seed 9), or one that diverged on both sides, is no such failure: the interval stands. At the chosen
    lrs the divergence rule reads divergences, so one there leaves the contrast to the seeds both finished."""
    from dataclasses import replace

    from ffnbench.stats.bootstrap import nested_lr_contrast

    a = _side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, -1.0)
    b = _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0, tie=True)
    survivors = {s: w for s, w in b.judged[2.0].items() if s > 1}
    one_sided = replace(b, judged={**b.judged, 2.0: survivors}, diverged={2.0: frozenset({0, 1})})
    assert nested_lr_contrast([a, one_sided]) is None
    only_b = replace(b, diverged={2.0: frozenset({9})})
    assert nested_lr_contrast([a, only_b]) is not None
    # a chooses lr 1 always: seeds 0 and 1 diverged on a there too, so at (a: lr 1, b: lr 2) they failed on both sides
    a_survivors = {s: w for s, w in a.judged[1.0].items() if s > 1}
    both = [replace(a, judged={**a.judged, 1.0: a_survivors}, diverged={1.0: frozenset({0, 1})}), one_sided]
    assert nested_lr_contrast(both) is not None
    at_chosen = replace(b, judged={**b.judged, 1.0: {s: w for s, w in b.judged[1.0].items() if s > 0}},
                        diverged={1.0: frozenset({0})})
    kept = nested_lr_contrast([a, at_chosen])
    assert kept is not None and kept.n == 5


def test_nested_contrast_rejects_runs_scored_on_other_windows_instead_of_raising():
    from dataclasses import replace

    from ffnbench.stats.bootstrap import nested_lr_contrast

    a = _side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, -1.0)
    b = _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0)
    two_windows = replace(b, judged={lr: {s: w * 2 for s, w in at.items()} for lr, at in b.judged.items()})
    assert nested_lr_contrast([a, two_windows]) is None  # the chosen lrs' runs are not scored alike: no contrast


def test_a_widened_interval_never_gives_a_smaller_p_than_the_one_it_contains():
    from ffnbench.stats.bootstrap import hull
    from ffnbench.stats.intervals import Paired
    from ffnbench.stats.verdicts import verdict_better

    rng = np.random.default_rng(0)
    nested = Paired(6, 0.05, 0.01, 0.034, 0.066, 0.0, tuple(range(6)), "nested bootstrap",
                    boot=tuple(np.sort(rng.normal(0.05, 0.008, 2000)).tolist()))
    judged = one_sample(dict(enumerate([0.02, 0.08, 0.05, 0.03, 0.07, 0.05])))
    widened = hull(nested, judged)
    assert (widened.ci_low, widened.ci_high) == (judged.ci_low, judged.ci_high)
    assert verdict_better(widened).p_value == pytest.approx(verdict_better(judged).p_value)  # the larger: judged's
    assert verdict_better(nested).p_value == pytest.approx(1 / 2001)  # no replicate at or below 0: at least 1/(B+1)


def test_nested_contrast_says_how_often_its_resamples_kept_the_chosen_lrs():
    from ffnbench.stats.bootstrap import nested_lr_contrast

    a = _side(3.0, 3.5, {1.0: 3.0, 2.0: 3.2}, -1.0)
    assert nested_lr_contrast([a, _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0)]).kept == 1.0
    moving = nested_lr_contrast([a, _side(3.1, 3.6, {1.0: 3.1, 2.0: 2.9}, 1.0, tie=True)])
    assert moving.kept == pytest.approx(20 / 27, abs=0.03)  # seed 100 drawn at most once of 3: (8 + 12) / 27
