"""ffnbench.stats.power against the noncentral t: the minimal detectable effect, and the seeds an effect
or an interval half-width needs."""

import math

import pytest
from scipy import stats as st

from ffnbench.stats.power import SEEDS_CAP, minimal_detectable_effect, seeds_for_halfwidth, seeds_needed


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
    mde = minimal_detectable_effect(0.01, 3)
    assert mde > old and paired_t_power(mde, 0.01, 3) == pytest.approx(0.80, abs=1e-6)
    for n, power, alpha in ((2, 0.8, 0.05), (10, 0.9, 0.01), (50, 0.8, 0.05)):
        assert paired_t_power(minimal_detectable_effect(0.02, n, alpha, power), 0.02, n, alpha) \
            == pytest.approx(power, abs=1e-6)
    assert minimal_detectable_effect(0.01, 1) is None
    assert minimal_detectable_effect(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="alpha < power"):
        minimal_detectable_effect(0.01, 3, alpha=0.05, power=0.01)


def test_seeds_needed_is_the_smallest_n_that_resolves_the_effect():
    need = seeds_needed(0.01, effect=0.01)
    assert not need.capped and need.n == 10  # exact: MDE(9) = 0.0106, MDE(10) = 0.00990
    assert minimal_detectable_effect(0.01, need.n) <= 0.01 < minimal_detectable_effect(0.01, need.n - 1)
    assert seeds_needed(0.01, effect=1.0).n == 2
    huge = seeds_needed(10.0, effect=0.01)
    assert huge.capped and huge.n == SEEDS_CAP and str(huge) == f"> {SEEDS_CAP}"


def test_seeds_for_a_target_interval_half_width_is_the_smallest_n_whose_t_interval_fits():
    def half(n, sd):
        return st.t.ppf(0.975, n - 1) * sd / n ** 0.5

    need = seeds_for_halfwidth(0.02, 0.02)
    assert half(need.n, 0.02) <= 0.02 < half(need.n - 1, 0.02) and not need.capped
    assert need.n == 7  # t(6)·0.02/√7 = 0.0185; t(5)·0.02/√6 = 0.021
    assert seeds_for_halfwidth(10.0, 0.02).capped
