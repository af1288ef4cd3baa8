"""ffnbench.stats.verdicts: the threshold rules, the one-sided p-value each verdict carries, and the
exact-test rule for rates."""

import numpy as np
import pytest
from scipy import stats as st

from ffnbench.stats.intervals import Paired, one_sample, summarize, welch
from ffnbench.stats.rates import rate_difference
from ffnbench.stats.verdicts import (
    CONTRADICTED,
    EQUIVALENT,
    INCONCLUSIVE,
    NO_GAIN,
    SUPPORTED,
    Verdict,
    verdict_at_least,
    verdict_beats,
    verdict_below,
    verdict_better,
    verdict_rate_lower,
    verdict_within,
)


@pytest.mark.parametrize(
    ("values", "rule", "expected"),
    [
        ([0.001, 0.002, 0.0015], lambda s: verdict_below(s, 0.01), SUPPORTED),
        ([0.05, 0.06, 0.055], lambda s: verdict_below(s, 0.01), CONTRADICTED),
        ([0.0, 0.02, 0.01], lambda s: verdict_below(s, 0.01), INCONCLUSIVE),
        ([0.5, 0.52, 0.51], lambda s: verdict_at_least(s, 0.4), SUPPORTED),
        ([0.1, 0.12, 0.11], lambda s: verdict_at_least(s, 0.4), CONTRADICTED),
        ([0.5, 0.51, 0.49], lambda s: verdict_within(s, (0.4, 0.6), (0.3, 0.7)), SUPPORTED),
        ([0.8, 0.81, 0.79], lambda s: verdict_within(s, (0.4, 0.6), (0.3, 0.7)), CONTRADICTED),
        ([0.62, 0.66, 0.64], lambda s: verdict_within(s, (0.4, 0.6), (0.3, 0.7)), INCONCLUSIVE),
    ],
)
def test_threshold_rules(values, rule, expected):
    assert rule(summarize(values)).verdict == expected


def test_margin_rule_is_symmetric():
    small = summarize([0.004, 0.006, 0.005])
    assert verdict_better(small).verdict == SUPPORTED
    assert verdict_better(small, margin=0.01).verdict == INCONCLUSIVE
    assert verdict_better(summarize([-0.05, -0.06, -0.055]), margin=0.01).verdict == CONTRADICTED


@pytest.mark.parametrize(
    ("values", "expected", "reason"),
    [
        ([0.05, 0.06, 0.055], SUPPORTED, "lies above 0"),  # a gain beyond the margin
        ([0.012, 0.018, 0.015], SUPPORTED, "its relevance not shown"),  # above 0, its lower end below +m
        ([0.004, 0.006, 0.005], CONTRADICTED, EQUIVALENT),  # above 0 but inside (0, m): a gain too small (DESIGN §9)
        ([0.002, -0.001, 0.0005], CONTRADICTED, EQUIVALENT),  # around 0, inside ±m
        ([-0.004, -0.006, -0.005], CONTRADICTED, EQUIVALENT),  # below 0, inside (−m, 0)
        ([-0.015, -0.005, -0.010], CONTRADICTED, NO_GAIN),  # contains 0, below +m, reaching below −m: no gain ≥ m
        ([-0.05, -0.06, -0.055], CONTRADICTED, "lies below 0"),
        ([0.03, -0.03, 0.0], INCONCLUSIVE, "contains 0 and reaches +0.01"),
    ],
)
def test_beats_reads_the_outcome_table_with_the_margin_first(values, expected, reason):
    verdict = verdict_beats(summarize(values), margin=0.01)
    assert verdict.verdict == expected and reason in verdict.reason, verdict


def test_beats_is_monotone_an_interval_further_below_never_reads_less_contradicted():
    order = {SUPPORTED: 2, INCONCLUSIVE: 1, CONTRADICTED: 0}
    base = [0.004, -0.002, 0.001]  # a 95% CI 0.015 wide: it fits inside ±m, and can straddle −m
    for shift in np.linspace(-0.1, 0.1, 81):
        up = verdict_beats(summarize([v + shift + 0.0025 for v in base]), margin=0.01)
        down = verdict_beats(summarize([v + shift for v in base]), margin=0.01)
        assert order[down.verdict] <= order[up.verdict], (shift, down, up)
        if down.verdict == up.verdict == CONTRADICTED:  # and no weaker for it after a multiplicity correction
            assert down.p_value <= up.p_value, (shift, down, up)


@pytest.mark.parametrize("values", [[0.004, 0.006, 0.005], [-0.015, -0.005, -0.010], [-0.05, -0.06, -0.055]])
def test_every_contradiction_of_beats_carries_the_one_test_it_made_against_the_margin(values):
    """Inside ±m, no gain as large as m, below 0: one decision (the upper end below +m), so one p: the one-sided test
    of Δ < m. (The equivalence row carried the larger of two tests and the below-0 row the test against 0: both
    larger, so after Holm an interval further below could read less contradicted.)"""
    for result in (summarize(values), one_sample(dict(enumerate(values)))):
        verdict = verdict_beats(result, margin=0.01)
        assert verdict.verdict == CONTRADICTED
        assert verdict.p_value == pytest.approx(ttest(values, 0.01, "less"), rel=1e-9)
        assert 2 * verdict.p_value < 0.05


WIN, LOSS, TIE = [0.10, 0.12, 0.11, 0.09], [-0.10, -0.12, -0.11, -0.09], [0.01, -0.02, 0.005]


LOW, HIGH, HALF = [0.001, 0.002, 0.0015], [0.05, 0.06, 0.055], [0.5, 0.52, 0.51]


def ttest(values, against, alternative):
    return st.ttest_1samp(values, against, alternative=alternative).pvalue


@pytest.mark.parametrize(
    ("values", "rule", "expected", "p"),
    [
        (WIN, verdict_better, SUPPORTED, ttest(WIN, 0.0, "greater")),
        (WIN, lambda s: verdict_better(s, margin=0.05), SUPPORTED, ttest(WIN, 0.05, "greater")),
        (LOSS, lambda s: verdict_better(s, margin=0.05), CONTRADICTED, ttest(LOSS, -0.05, "less")),
        (TIE, verdict_better, INCONCLUSIVE, ttest(TIE, 0.0, "less")),
        (LOW, lambda s: verdict_below(s, 0.01), SUPPORTED, ttest(LOW, 0.01, "less")),
        (HIGH, lambda s: verdict_below(s, 0.01), CONTRADICTED, ttest(HIGH, 0.01, "greater")),
        (HALF, lambda s: verdict_at_least(s, 0.4), SUPPORTED, ttest(HALF, 0.4, "greater")),
        ([0.8, 0.81, 0.79], lambda s: verdict_within(s, (0.4, 0.6), (0.3, 0.7)), CONTRADICTED,
         ttest([0.8, 0.81, 0.79], 0.7, "greater")),
        ([0.5, 0.51, 0.49], lambda s: verdict_within(s, (0.4, 0.6), (0.3, 0.7)), SUPPORTED,
         max(ttest([0.5, 0.51, 0.49], 0.4, "greater"), ttest([0.5, 0.51, 0.49], 0.6, "less"))),
    ],
)
def test_verdicts_carry_the_one_sided_p_of_their_decision(values, rule, expected, p):
    for result in (summarize(values), one_sample(dict(enumerate(values)))):
        verdict = rule(result)
        assert verdict.verdict == expected and verdict.p_value == pytest.approx(p, rel=1e-9)
        # the interval decides exactly when the two-sided equivalent is significant at 5%
        assert (2 * verdict.p_value < 0.05) == (expected != INCONCLUSIVE)


@pytest.mark.parametrize(("at_or_below", "expected"), [(49, SUPPORTED), (50, INCONCLUSIVE)])
def test_a_bootstrap_interval_excludes_zero_exactly_when_its_p_is_below_0_025(at_or_below, expected):
    """2,000 replicates, `at_or_below` of them ≤ 0, the interval as the bootstrap takes it (inverted-CDF quantiles):
    49 (2.45%) put its low end above 0 and p below 0.025; 50 (exactly 2.5%) put it at a replicate ≤ 0, p = 0.025,
    and the verdict stays open, so p = 0.025 is never a decision the interval does not make."""
    boot = np.sort(np.concatenate([np.linspace(-0.02, 0.0, at_or_below), np.linspace(0.001, 0.05, 2000 - at_or_below)]))
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    result = Paired(5, float(boot.mean()), 0.01, float(low), float(high), None, (0, 1, 2, 3, 4), "bootstrap",
                    boot=tuple(boot.tolist()))
    verdict = verdict_better(result)
    assert verdict.verdict == expected and verdict.p_value == pytest.approx(at_or_below / 2000)
    assert (verdict.p_value < 0.025) == (low > 0) == (expected == SUPPORTED)


def test_welch_verdict_p_uses_welchs_t():
    a, b = [3.0, 3.2, 3.1], [2.8, 2.9, 2.7, 2.85]
    verdict = verdict_better(welch(b, a))  # a − b > 0
    assert verdict.verdict == SUPPORTED
    assert verdict.p_value == pytest.approx(st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((12, 20, 0, 20), SUPPORTED),  # a diverges 12 times in 20, b never
        ((0, 20, 12, 20), CONTRADICTED),
        ((1, 3, 0, 3), INCONCLUSIVE),  # one run differing never decides (p = 1)
        ((0, 3, 1, 3), INCONCLUSIVE),
        ((3, 3, 3, 3), INCONCLUSIVE),
    ],
)
def test_verdict_rate_lower(counts, expected):
    r = rate_difference(*counts)
    verdict = verdict_rate_lower(r)
    assert verdict.verdict == expected and verdict.p_value == pytest.approx(r.p_value / 2)
    assert f"{counts[2]}/{counts[3]} vs {counts[0]}/{counts[1]}" in verdict.reason


def test_verdict_rate_lower_without_runs_is_inconclusive():
    verdict = verdict_rate_lower(rate_difference(0, 3, 0, 0))
    assert verdict == Verdict(INCONCLUSIVE, "no runs on side b") and verdict.p_value is None
