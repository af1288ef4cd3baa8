"""ffnbench.stats against hand computations and scipy: intervals, paired and unpaired differences, power,
and the verdict rules."""

import math

import pytest
from scipy import stats as st

from ffnbench import stats
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, ONE_SEED, SUPPORTED


def test_summarize_matches_a_hand_computed_t_interval():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0])
    sd = math.sqrt(((1.5**2) * 2 + (0.5**2) * 2) / 3)  # sample std, ddof = 1
    half = 3.182446305284263 * sd / 2  # t(0.975, df = 3) · sd / √4
    assert (s.n, s.mean) == (4, 2.5)
    assert s.std == pytest.approx(sd)
    assert (s.ci_low, s.ci_high) == (pytest.approx(2.5 - half), pytest.approx(2.5 + half))
    assert (s.ci_low, s.ci_high) == pytest.approx(st.t.interval(0.95, 3, loc=2.5, scale=st.sem([1, 2, 3, 4])))


def test_fewer_than_two_values_have_no_interval():
    one, none = stats.summarize([3.2]), stats.summarize([])
    assert (one.n, one.mean, one.std, one.ci_low, one.ci_high, one.has_ci) == (1, 3.2, None, None, None, False)
    assert (none.n, none.mean) == (0, None)


A = {0: 3.00, 1: 3.10, 2: 2.90, 3: 3.05}


def shifted(by: list[float]) -> dict[int, float]:
    return {seed: A[seed] + d for seed, d in zip(sorted(A), by)}


def test_paired_clear_win_matches_scipy():
    b = shifted([0.10, 0.12, 0.11, 0.09])
    p = stats.paired(A, b)  # b − a
    assert p.n == 4 and p.seeds == (0, 1, 2, 3) and p.method == "paired"
    assert p.mean == pytest.approx(0.105)
    assert p.p_value == pytest.approx(st.ttest_rel(list(b.values()), list(A.values())).pvalue)
    diffs = [0.10, 0.12, 0.11, 0.09]
    assert (p.ci_low, p.ci_high) == pytest.approx(st.t.interval(0.95, 3, loc=0.105, scale=st.sem(diffs)))
    assert stats.verdict_better(p).verdict == SUPPORTED


def test_paired_clear_loss_and_tie():
    assert stats.verdict_better(stats.paired(A, shifted([-0.10, -0.12, -0.11, -0.09]))).verdict == CONTRADICTED
    tie = stats.paired(A, shifted([0.01, -0.02, 0.005, 0.004]))
    assert tie.ci_low < 0 < tie.ci_high
    verdict = stats.verdict_better(tie)
    assert verdict.verdict == INCONCLUSIVE and "contains 0" in verdict.reason


def test_paired_uses_only_the_shared_seeds():
    p = stats.paired({0: 1.0, 1: 2.0, 2: 3.0}, {1: 2.5, 2: 3.7, 3: 9.0})
    assert p.seeds == (1, 2) and p.n == 2 and p.mean == pytest.approx(0.6)


def test_one_seed_is_at_most_inconclusive():
    p = stats.paired({0: 3.0}, {0: 2.0})
    assert (p.n, p.ci_low, p.p_value) == (1, None, None)
    for rule in (stats.verdict_better, lambda x: stats.verdict_below(x, 0.01), lambda x: stats.verdict_at_least(x, 0)):
        assert rule(p) == stats.Verdict(INCONCLUSIVE, ONE_SEED)


def test_identical_differences_give_a_point_interval():
    p = stats.paired({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5})
    assert (p.ci_low, p.ci_high, p.p_value) == (0.5, 0.5, 0.0)
    assert stats.verdict_better(p).verdict == SUPPORTED


def test_welch_for_runs_without_shared_seeds():
    a, b = {0: 3.0, 1: 3.2, 2: 3.1}, {5: 2.8, 6: 2.9, 7: 2.7, 8: 2.85}
    w = stats.compare(a, b)
    assert w.method == "welch" and w.seeds == ()
    xa, xb = list(a.values()), list(b.values())
    va, vb = st.tvar(xa) / 3, st.tvar(xb) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    half = st.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert w.mean == pytest.approx(sum(xb) / 4 - sum(xa) / 3)
    assert (w.ci_low, w.ci_high) == pytest.approx((w.mean - half, w.mean + half))
    assert w.p_value == pytest.approx(st.ttest_ind(xb, xa, equal_var=False).pvalue)
    assert stats.compare({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.4}).method == "paired"  # shared seeds: paired


def test_minimal_detectable_effect_and_seeds_needed():
    mde = stats.minimal_detectable_effect(0.01, 3)
    assert mde == pytest.approx((st.t.ppf(0.975, 2) + st.t.ppf(0.8, 2)) * 0.01 / math.sqrt(3))
    assert stats.minimal_detectable_effect(0.01, 1) is None
    need = stats.seeds_needed(0.01, effect=0.01)
    assert not need.capped
    assert stats.minimal_detectable_effect(0.01, need.n) <= 0.01 < stats.minimal_detectable_effect(0.01, need.n - 1)
    huge = stats.seeds_needed(10.0, effect=0.01)
    assert huge.capped and huge.n == stats.SEEDS_CAP and str(huge) == f"> {stats.SEEDS_CAP}"


@pytest.mark.parametrize(
    ("values", "rule", "expected"),
    [
        ([0.001, 0.002, 0.0015], lambda s: stats.verdict_below(s, 0.01), SUPPORTED),
        ([0.05, 0.06, 0.055], lambda s: stats.verdict_below(s, 0.01), CONTRADICTED),
        ([0.0, 0.02, 0.01], lambda s: stats.verdict_below(s, 0.01), INCONCLUSIVE),
        ([0.5, 0.52, 0.51], lambda s: stats.verdict_at_least(s, 0.4), SUPPORTED),
        ([0.1, 0.12, 0.11], lambda s: stats.verdict_at_least(s, 0.4), CONTRADICTED),
        ([0.5, 0.51, 0.49], lambda s: stats.verdict_within(s, (0.4, 0.6), (0.3, 0.7)), SUPPORTED),
        ([0.8, 0.81, 0.79], lambda s: stats.verdict_within(s, (0.4, 0.6), (0.3, 0.7)), CONTRADICTED),
        ([0.62, 0.66, 0.64], lambda s: stats.verdict_within(s, (0.4, 0.6), (0.3, 0.7)), INCONCLUSIVE),
    ],
)
def test_threshold_rules(values, rule, expected):
    assert rule(stats.summarize(values)).verdict == expected


def test_margin_rule_is_symmetric():
    small = stats.summarize([0.004, 0.006, 0.005])
    assert stats.verdict_better(small).verdict == SUPPORTED
    assert stats.verdict_better(small, margin=0.01).verdict == INCONCLUSIVE
    assert stats.verdict_better(stats.summarize([-0.05, -0.06, -0.055]), margin=0.01).verdict == CONTRADICTED


def test_combine_is_a_conjunction():
    yes, no, maybe = (stats.Verdict(v, v) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE))
    assert stats.combine([("a", yes), ("b", yes)]).verdict == SUPPORTED
    assert stats.combine([("a", yes), ("b", maybe)]).verdict == INCONCLUSIVE
    mixed = stats.combine([("a", yes), ("b", no), ("c", maybe)])
    assert mixed.verdict == CONTRADICTED and mixed.reason.startswith("b:")
    assert stats.combine([]).verdict == INCONCLUSIVE
