"""ffnbench.stats.intervals against hand computations and scipy: summaries and their t-intervals, paired
and unpaired (Welch) differences, and no interval where there is no estimate of the noise."""

import math

import pytest
from scipy import stats as st

from ffnbench.stats.intervals import compare, one_sample, paired, summarize, welch
from ffnbench.stats.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    NO_SPREAD,
    ONE_SEED,
    SUPPORTED,
    Verdict,
    verdict_at_least,
    verdict_below,
    verdict_better,
    verdict_within,
)


def test_summarize_matches_a_hand_computed_t_interval():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    sd = math.sqrt(((1.5**2) * 2 + (0.5**2) * 2) / 3)  # sample std, ddof = 1
    half = 3.182446305284263 * sd / 2  # t(0.975, df = 3) · sd / √4
    assert (s.n, s.mean) == (4, 2.5)
    assert s.std == pytest.approx(sd)
    assert (s.ci_low, s.ci_high) == (pytest.approx(2.5 - half), pytest.approx(2.5 + half))
    assert (s.ci_low, s.ci_high) == pytest.approx(st.t.interval(0.95, 3, loc=2.5, scale=st.sem([1, 2, 3, 4])))


def test_fewer_than_two_values_have_no_interval():
    one, none = summarize([3.2]), summarize([])
    assert (one.n, one.mean, one.std, one.ci_low, one.ci_high, one.has_ci) == (1, 3.2, None, None, None, False)
    assert (none.n, none.mean) == (0, None)


A = {0: 3.00, 1: 3.10, 2: 2.90, 3: 3.05}


def shifted(by: list[float]) -> dict[int, float]:
    return {seed: A[seed] + d for seed, d in zip(sorted(A), by)}


def test_paired_clear_win_matches_scipy():
    b = shifted([0.10, 0.12, 0.11, 0.09])
    p = paired(A, b)  # b − a
    assert p.n == 4 and p.seeds == (0, 1, 2, 3) and p.method == "paired"
    assert p.mean == pytest.approx(0.105)
    assert p.p_value == pytest.approx(st.ttest_rel(list(b.values()), list(A.values())).pvalue)
    diffs = [0.10, 0.12, 0.11, 0.09]
    assert (p.ci_low, p.ci_high) == pytest.approx(st.t.interval(0.95, 3, loc=0.105, scale=st.sem(diffs)))
    assert verdict_better(p).verdict == SUPPORTED


def test_paired_clear_loss_and_tie():
    assert verdict_better(paired(A, shifted([-0.10, -0.12, -0.11, -0.09]))).verdict == CONTRADICTED
    tie = paired(A, shifted([0.01, -0.02, 0.005, 0.004]))
    assert tie.ci_low < 0 < tie.ci_high
    verdict = verdict_better(tie)
    assert verdict.verdict == INCONCLUSIVE and "contains 0" in verdict.reason


def test_paired_uses_only_the_shared_seeds():
    p = paired({0: 1.0, 1: 2.0, 2: 3.0}, {1: 2.5, 2: 3.7, 3: 9.0})
    assert p.seeds == (1, 2) and p.n == 2 and p.mean == pytest.approx(0.6)


def test_one_seed_is_at_most_inconclusive():
    p = paired({0: 3.0}, {0: 2.0})
    assert (p.n, p.ci_low, p.p_value) == (1, None, None)
    for rule in (verdict_better, lambda x: verdict_below(x, 0.01), lambda x: verdict_at_least(x, 0)):
        assert rule(p) == Verdict(INCONCLUSIVE, ONE_SEED)


RULES = (verdict_better, lambda x: verdict_below(x, 0.01), lambda x: verdict_at_least(x, 0))


@pytest.mark.parametrize("diffs", [{0: 0.1, 1: 0.1}, {0: 0.1, 1: 0.1, 2: 0.1}, {0: 0.0, 1: 0.0}])
def test_identical_differences_are_inconclusive(diffs):
    p = one_sample(diffs)  # the old code gave the point [0.1, 0.1] with p = 0: supported at n = 2
    assert (p.n, p.mean, p.std, p.has_ci, p.p_value) == (len(diffs), pytest.approx(diffs[0]), 0.0, False, None)
    for rule in RULES:
        verdict = rule(p)
        assert (verdict.verdict, verdict.reason, verdict.p_value) == (INCONCLUSIVE, NO_SPREAD, None)


def test_identical_values_and_constant_welch_sides_are_inconclusive():
    assert paired({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5}).has_ci is False  # b − a = 0.5 at both seeds
    s = summarize([0.3, 0.3, 0.3])  # the descriptive interval stays a point; the rules refuse it
    assert (s.ci_low, s.ci_high) == (0.3, 0.3)
    for rule in (*RULES, lambda x: verdict_within(x, (0.2, 0.4), (0.1, 0.5))):
        assert rule(s) == Verdict(INCONCLUSIVE, NO_SPREAD)
    w = welch([1.0, 1.0, 1.0], [2.0, 2.0])
    assert (w.method, w.mean, w.has_ci, w.p_value) == ("welch", 1.0, False, None)
    assert verdict_better(w).reason == NO_SPREAD


def test_welch_for_runs_without_shared_seeds():
    a, b = {0: 3.0, 1: 3.2, 2: 3.1}, {5: 2.8, 6: 2.9, 7: 2.7, 8: 2.85}
    w = compare(a, b)
    assert w.method == "welch" and w.seeds == ()
    xa, xb = list(a.values()), list(b.values())
    va, vb = st.tvar(xa) / 3, st.tvar(xb) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    half = st.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert w.mean == pytest.approx(sum(xb) / 4 - sum(xa) / 3)
    assert (w.ci_low, w.ci_high) == pytest.approx((w.mean - half, w.mean + half))
    assert w.p_value == pytest.approx(st.ttest_ind(xb, xa, equal_var=False).pvalue)
    assert compare({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.4}).method == "paired"  # shared seeds: paired


def test_a_fraction_interval_stays_inside_zero_one_and_a_t_interval_does_not():
    """Per-seed dead fractions 0.02, 0.6, 0.05 (C6 at a large lr): the t interval reaches below 0, the logit one
    stays in (0, 1), contains the mean, and its draws give the verdicts' p-values."""
    from ffnbench.stats.intervals import summarize_fraction

    values = [0.02, 0.6, 0.05]
    assert summarize(values).ci_low < 0
    f = summarize_fraction(values)
    assert 0 < f.ci_low < f.mean < f.ci_high < 1 and len(f.boot) > 1000
    assert summarize_fraction([0.5, 0.5]).ci_low == summarize([0.5, 0.5]).ci_low  # no spread: as summarize
    assert summarize_fraction([0.3]).ci_low is None


@pytest.mark.parametrize("values", [[0.0, 1.0], [0.0, 0.5], [0.0, 1.0, 0.0]])
def test_a_fraction_interval_from_seeds_at_both_ends_is_built_without_an_overflow(values):
    """Seeds at 0 and 1 put the logits ±9.2 apart; with one or two degrees of freedom the t draws reach logits
    beyond −709, where exp(−x) overflows. Every report printed numpy's overflow warning from it: the logistic is
    computed stably, and each draw is still 1 / (1 + e^−x) (to rounding) wherever that is finite."""
    import warnings

    import numpy as np

    from ffnbench.stats.intervals import FRACTION_DRAWS, FRACTION_EPS, summarize_fraction

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = summarize_fraction(values)
    draws = np.asarray(f.boot)
    assert len(draws) == FRACTION_DRAWS and np.all((draws >= 0) & (draws <= 1))
    assert np.all(np.diff(draws) >= 0)  # sorted: the verdicts read p-values off them
    z = np.log(np.clip(values, FRACTION_EPS, 1 - FRACTION_EPS) / (1 - np.clip(values, FRACTION_EPS, 1 - FRACTION_EPS)))
    t = np.random.default_rng(0).standard_t(len(values) - 1, FRACTION_DRAWS)
    x = np.sort(z.mean() + z.std(ddof=1) / math.sqrt(len(values)) * t)
    assert x[0] < -709  # the input does reach the region where the plain formula overflows
    with np.errstate(over="ignore"):
        plain = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(draws, plain, rtol=1e-12, atol=1e-300)  # below e^-709: 0 or denormal
    assert 0 <= f.ci_low < f.mean < f.ci_high <= 1
