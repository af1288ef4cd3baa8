"""ffnbench.stats against hand computations and scipy: intervals, paired and unpaired differences, power,
and the verdict rules."""

import math

import numpy as np
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


RULES = (stats.verdict_better, lambda x: stats.verdict_below(x, 0.01), lambda x: stats.verdict_at_least(x, 0))


@pytest.mark.parametrize("diffs", [{0: 0.1, 1: 0.1}, {0: 0.1, 1: 0.1, 2: 0.1}, {0: 0.0, 1: 0.0}])
def test_identical_differences_are_inconclusive(diffs):
    p = stats.one_sample(diffs)  # the old code gave the point [0.1, 0.1] with p = 0: supported at n = 2
    assert (p.n, p.mean, p.std, p.has_ci, p.p_value) == (len(diffs), pytest.approx(diffs[0]), 0.0, False, None)
    for rule in RULES:
        verdict = rule(p)
        assert (verdict.verdict, verdict.reason, verdict.p_value) == (INCONCLUSIVE, stats.NO_SPREAD, None)


def test_identical_values_and_constant_welch_sides_are_inconclusive():
    assert stats.paired({0: 1.0, 1: 2.0}, {0: 1.5, 1: 2.5}).has_ci is False  # b − a = 0.5 at both seeds
    s = stats.summarize([0.3, 0.3, 0.3])  # the descriptive interval stays a point; the rules refuse it
    assert (s.ci_low, s.ci_high) == (0.3, 0.3)
    for rule in (*RULES, lambda x: stats.verdict_within(x, (0.2, 0.4), (0.1, 0.5))):
        assert rule(s) == stats.Verdict(INCONCLUSIVE, stats.NO_SPREAD)
    w = stats.welch([1.0, 1.0, 1.0], [2.0, 2.0])
    assert (w.method, w.mean, w.has_ci, w.p_value) == ("welch", 1.0, False, None)
    assert stats.verdict_better(w).reason == stats.NO_SPREAD


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


def paired_t_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test, straight from the noncentral t (the lower tail by symmetry:
    scipy's nct.cdf is NaN at some large noncentralities with one degree of freedom)."""
    crit, ncp = st.t.ppf(1 - alpha / 2, n - 1), effect * math.sqrt(n) / sd
    return st.nct.sf(crit, n - 1, ncp) + st.nct.sf(crit, n - 1, -ncp)


def test_minimal_detectable_effect_has_the_stated_power():
    old = (st.t.ppf(0.975, 2) + st.t.ppf(0.8, 2)) * 0.01 / math.sqrt(3)  # the central-t approximation
    assert paired_t_power(old, 0.01, 3) == pytest.approx(0.766, abs=5e-3)  # short of 0.80 at n = 3
    crit, ncp = st.t.ppf(0.975, 2), old * math.sqrt(3) / 0.01
    assert paired_t_power(old, 0.01, 3) == pytest.approx(st.nct.sf(crit, 2, ncp) + st.nct.cdf(-crit, 2, ncp))
    mde = stats.minimal_detectable_effect(0.01, 3)
    assert mde > old and paired_t_power(mde, 0.01, 3) == pytest.approx(0.80, abs=1e-6)
    for n, power, alpha in ((2, 0.8, 0.05), (10, 0.9, 0.01), (50, 0.8, 0.05)):
        assert paired_t_power(stats.minimal_detectable_effect(0.02, n, alpha, power), 0.02, n, alpha) \
            == pytest.approx(power, abs=1e-6)
    assert stats.minimal_detectable_effect(0.01, 1) is None
    assert stats.minimal_detectable_effect(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="alpha < power"):
        stats.minimal_detectable_effect(0.01, 3, alpha=0.05, power=0.01)


def test_seeds_needed_is_the_smallest_n_that_resolves_the_effect():
    need = stats.seeds_needed(0.01, effect=0.01)
    assert not need.capped and need.n == 10  # exact: MDE(9) = 0.0106, MDE(10) = 0.00990
    assert stats.minimal_detectable_effect(0.01, need.n) <= 0.01 < stats.minimal_detectable_effect(0.01, need.n - 1)
    assert stats.seeds_needed(0.01, effect=1.0).n == 2
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


# ---- p-values of verdicts, and Holm over a claim's parts ---------------------------------------------------

WIN, LOSS, TIE = [0.10, 0.12, 0.11, 0.09], [-0.10, -0.12, -0.11, -0.09], [0.01, -0.02, 0.005]
LOW, HIGH, HALF = [0.001, 0.002, 0.0015], [0.05, 0.06, 0.055], [0.5, 0.52, 0.51]


def ttest(values, against, alternative):
    return st.ttest_1samp(values, against, alternative=alternative).pvalue


@pytest.mark.parametrize(
    ("values", "rule", "expected", "p"),
    [
        (WIN, stats.verdict_better, SUPPORTED, ttest(WIN, 0.0, "greater")),
        (WIN, lambda s: stats.verdict_better(s, margin=0.05), SUPPORTED, ttest(WIN, 0.05, "greater")),
        (LOSS, lambda s: stats.verdict_better(s, margin=0.05), CONTRADICTED, ttest(LOSS, -0.05, "less")),
        (TIE, stats.verdict_better, INCONCLUSIVE, ttest(TIE, 0.0, "less")),
        (LOW, lambda s: stats.verdict_below(s, 0.01), SUPPORTED, ttest(LOW, 0.01, "less")),
        (HIGH, lambda s: stats.verdict_below(s, 0.01), CONTRADICTED, ttest(HIGH, 0.01, "greater")),
        (HALF, lambda s: stats.verdict_at_least(s, 0.4), SUPPORTED, ttest(HALF, 0.4, "greater")),
        ([0.8, 0.81, 0.79], lambda s: stats.verdict_within(s, (0.4, 0.6), (0.3, 0.7)), CONTRADICTED,
         ttest([0.8, 0.81, 0.79], 0.7, "greater")),
        ([0.5, 0.51, 0.49], lambda s: stats.verdict_within(s, (0.4, 0.6), (0.3, 0.7)), SUPPORTED,
         max(ttest([0.5, 0.51, 0.49], 0.4, "greater"), ttest([0.5, 0.51, 0.49], 0.6, "less"))),
    ],
)
def test_verdicts_carry_the_one_sided_p_of_their_decision(values, rule, expected, p):
    for result in (stats.summarize(values), stats.one_sample(dict(enumerate(values)))):
        verdict = rule(result)
        assert verdict.verdict == expected and verdict.p_value == pytest.approx(p, rel=1e-9)
        # the interval decides exactly when the two-sided equivalent is significant at 5%
        assert (2 * verdict.p_value < 0.05) == (expected != INCONCLUSIVE)


def test_welch_verdict_p_uses_welchs_t():
    a, b = [3.0, 3.2, 3.1], [2.8, 2.9, 2.7, 2.85]
    verdict = stats.verdict_better(stats.welch(b, a))  # a − b > 0
    assert verdict.verdict == SUPPORTED
    assert verdict.p_value == pytest.approx(st.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)


def part(verdict: str, p: float | None) -> stats.Verdict:
    return stats.Verdict(verdict, f"{verdict} alone", p)


def test_holm_two_parts_each_just_significant_alone_are_not_both_decisive():
    parts = [("a", part(SUPPORTED, 0.02)), ("b", part(CONTRADICTED, 0.02))]  # 2p = 0.04 > 0.05 / 2
    combined = stats.combine(parts)
    assert combined.verdict == INCONCLUSIVE  # without the correction: contradicted
    assert combined.reason.startswith("a: supported alone, but not significant after Holm over 2 parts "
                                      "(p = 0.04, needs ≤ 0.025); b: contradicted alone, but not significant")
    assert [v.verdict for _, v in stats.holm(parts)] == [INCONCLUSIVE, INCONCLUSIVE]


def test_holm_steps_down():
    strong = [("a", part(SUPPORTED, 0.001)), ("b", part(CONTRADICTED, 0.02))]  # 0.002 ≤ 0.025, then 0.04 ≤ 0.05
    assert [v.verdict for _, v in stats.holm(strong)] == [SUPPORTED, CONTRADICTED]
    assert stats.combine(strong).verdict == CONTRADICTED
    # sorted 2p = 0.02, 0.024, 0.024 against 0.0167, 0.025, 0.05: the first fails, and Holm stops there
    three = [("a", part(SUPPORTED, 0.012)), ("b", part(SUPPORTED, 0.01)), ("c", part(SUPPORTED, 0.012))]
    held = stats.holm(three)
    assert [v.verdict for _, v in held] == [INCONCLUSIVE] * 3
    assert held[0][1].reason.endswith("(p = 0.024, Holm stopped at a part with p = 0.02 > 0.017)")
    # an inconclusive part counts in the family (it was tested) and stays inconclusive
    mixed = [("a", part(SUPPORTED, 0.01)), ("b", part(INCONCLUSIVE, 0.3))]  # 0.02 ≤ 0.025
    assert [v.verdict for _, v in stats.holm(mixed)] == [SUPPORTED, INCONCLUSIVE]
    assert stats.holm([("a", part(SUPPORTED, 0.02)), ("b", part(INCONCLUSIVE, 0.3))])[0][1].verdict == INCONCLUSIVE


def test_holm_leaves_single_and_exact_parts_alone():
    single = [("a", part(CONTRADICTED, 0.02))]
    assert stats.holm(single) == single and stats.combine(single).verdict == CONTRADICTED
    exact = [("a", part(CONTRADICTED, None)), ("b", part(SUPPORTED, None)), ("c", part(SUPPORTED, 0.02))]
    assert stats.holm(exact) == exact and stats.combine(exact).verdict == CONTRADICTED
    assert stats.MULTIPLICITY == "Holm over a claim's parts, family α = 0.05"


# ---- rates with an exact test ------------------------------------------------------------------------------


def test_rate_difference_matches_fisher_and_newcombe():
    r = stats.rate_difference(48, 80, 56, 70)  # Newcombe (1998), Stat Med 17:873, example (a), method 10
    assert (r.rate_a, r.rate_b, r.difference) == (0.6, 0.8, pytest.approx(0.2))
    assert (r.ci_low, r.ci_high) == (pytest.approx(0.0524, abs=5e-5), pytest.approx(0.3339, abs=5e-5))
    assert r.p_value == pytest.approx(st.fisher_exact([[56, 14], [48, 32]]).pvalue)
    assert stats.rate_difference(0, 0, 1, 3).p_value is None
    with pytest.raises(ValueError, match="side b has 4 events in 3 runs"):
        stats.rate_difference(0, 3, 4, 3)


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
    r = stats.rate_difference(*counts)
    verdict = stats.verdict_rate_lower(r)
    assert verdict.verdict == expected and verdict.p_value == pytest.approx(r.p_value / 2)
    assert f"{counts[2]}/{counts[3]} vs {counts[0]}/{counts[1]}" in verdict.reason


def test_verdict_rate_lower_without_runs_is_inconclusive():
    verdict = stats.verdict_rate_lower(stats.rate_difference(0, 3, 0, 0))
    assert verdict == stats.Verdict(INCONCLUSIVE, "no runs on side b") and verdict.p_value is None


# ---- validation sampling noise: the hierarchical bootstrap --------------------------------------------------


def test_bootstrap_without_any_noise_has_no_interval():
    p = stats.hierarchical_bootstrap({0: [0.1, 0.1, 0.1], 1: [0.1, 0.1, 0.1], 2: [0.1] * 3})
    assert (p.method, p.n, p.mean, p.has_ci, p.p_value) == ("bootstrap", 3, pytest.approx(0.1), False, None)
    assert stats.verdict_better(p) == stats.Verdict(INCONCLUSIVE, stats.NO_SPREAD)
    one = stats.hierarchical_bootstrap({0: [0.1, 0.3, -0.2, 0.5]})  # one seed, many windows: still no interval
    assert (one.n, one.mean, one.has_ci) == (1, pytest.approx(0.175), False)
    assert stats.verdict_better(one).reason == ONE_SEED


def test_window_noise_widens_the_interval_beyond_the_t_interval_over_seed_means():
    seed_means = {0: 0.050, 1: 0.052, 2: 0.049, 3: 0.051, 4: 0.050}
    noise = [0.3, -0.3, 0.2, -0.2, 0.1, -0.1, 0.0, 0.0]  # mean 0: each seed's window mean is exactly its target
    windows = {s: [m + e for e in noise] for s, m in seed_means.items()}
    seeds_only = stats.one_sample(seed_means)
    both = stats.hierarchical_bootstrap(windows, seed=1)
    assert both.mean == pytest.approx(seeds_only.mean)
    assert stats.verdict_better(seeds_only).verdict == SUPPORTED  # the seeds alone look decisive
    assert both.ci_high - both.ci_low > 5 * (seeds_only.ci_high - seeds_only.ci_low)
    verdict = stats.verdict_better(both)
    assert verdict.verdict == INCONCLUSIVE and verdict.p_value > 0.025


def test_bootstrap_with_one_window_per_seed_is_a_seed_bootstrap_widened_to_the_t_interval():
    """One window per seed leaves only seed noise: the replicates are a plain seed bootstrap, and with five
    seeds its percentile interval is narrower than the t interval over the seeds, which is then returned."""
    values = [0.10, 0.12, 0.11, 0.09, 0.13]
    p = stats.hierarchical_bootstrap({s: [v] for s, v in enumerate(values)}, n_boot=500, seed=3)
    pick = np.random.default_rng(3).integers(0, 5, size=(500, 5))
    boot = np.sort(np.asarray(values)[pick].mean(axis=1))
    low, high = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    t = stats.one_sample(dict(enumerate(values)))
    assert t.ci_high - t.ci_low > high - low
    assert (p.ci_low, p.ci_high, p.p_value) == (t.ci_low, t.ci_high, t.p_value) and p.method == "bootstrap"
    assert p.std == pytest.approx(np.std(values, ddof=1))
    assert stats.verdict_better(p).verdict == SUPPORTED


def test_bootstrap_is_reproducible_for_a_seed():
    rng = np.random.default_rng(7)
    shared = rng.normal(0.0, 0.2, size=16)  # a strong shared window effect: the bootstrap is the wider interval
    windows = {s: list(0.01 + shared + rng.normal(0, 0.01, size=16)) for s in range(8)}
    first, again = stats.hierarchical_bootstrap(windows, seed=5), stats.hierarchical_bootstrap(windows, seed=5)
    assert first == again and first.boot == again.boot
    assert stats.hierarchical_bootstrap(windows, seed=6).ci_low != first.ci_low
    with pytest.raises(ValueError, match="seed 2 has no window differences"):
        stats.hierarchical_bootstrap({0: [0.1], 2: []})


def test_bootstrap_with_two_seeds_is_never_narrower_than_the_t_interval_over_seed_means():
    """Two seeds give a percentile bootstrap only three seed resamples: about [smaller mean, larger mean]. The
    t interval at n = 2 is mean ± 12.7·se; the bootstrap adds window noise and may not narrow that."""
    rng = np.random.default_rng(0)
    diffs = {0: 0.000 + rng.normal(0, 0.02, 2000), 1: 0.012 + rng.normal(0, 0.02, 2000)}
    boot = stats.hierarchical_bootstrap(diffs)
    t = stats.one_sample({s: float(np.mean(w)) for s, w in diffs.items()})
    assert boot.ci_low <= t.ci_low and boot.ci_high >= t.ci_high
    assert stats.verdict_below(boot, 0.015).verdict == INCONCLUSIVE  # a 0.015 margin is not shown by 2 seeds


def test_bootstrap_draws_the_same_windows_for_every_seed():
    """Every run is scored on the same windows: a window's shared effect must stay in the interval (drawing
    windows independently per seed would average it away by a factor of √n_seeds)."""
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.3, 1000)
    shared -= shared.mean()
    diffs = {s: m + shared + rng.normal(0, 0.01, 1000) for s, m in zip(range(3), (0.0025, 0.003, 0.0035))}
    boot = stats.hierarchical_bootstrap(diffs)
    window_se = float(np.std(shared, ddof=1) / math.sqrt(1000))  # the shared windows' own sampling error
    assert boot.ci_high - boot.ci_low > 3.0 * window_se  # ≈ 2·1.96·se when the shared effect is kept
    assert stats.verdict_below(boot, 0.015).verdict == INCONCLUSIVE


def test_seeds_for_a_target_interval_half_width_is_the_smallest_n_whose_t_interval_fits():
    from scipy import stats as st

    from ffnbench.stats import seeds_for_halfwidth

    def half(n, sd):
        return st.t.ppf(0.975, n - 1) * sd / n ** 0.5

    need = seeds_for_halfwidth(0.02, 0.02)
    assert half(need.n, 0.02) <= 0.02 < half(need.n - 1, 0.02) and not need.capped
    assert need.n == 7  # t(6)·0.02/√7 = 0.0185; t(5)·0.02/√6 = 0.021
    assert seeds_for_halfwidth(10.0, 0.02).capped
