"""ffnbench.stats.rates against Fisher's exact test and Newcombe's published interval."""

import pytest
from scipy import stats as st

from ffnbench.stats.rates import rate_difference


def test_rate_difference_matches_fisher_and_newcombe():
    r = rate_difference(48, 80, 56, 70)  # Newcombe (1998), Stat Med 17:873, example (a), method 10
    assert (r.rate_a, r.rate_b, r.difference) == (0.6, 0.8, pytest.approx(0.2))
    assert (r.ci_low, r.ci_high) == (pytest.approx(0.0524, abs=5e-5), pytest.approx(0.3339, abs=5e-5))
    assert r.p_value == pytest.approx(st.fisher_exact([[56, 14], [48, 32]]).pvalue)
    assert rate_difference(0, 0, 1, 3).p_value is None
    with pytest.raises(ValueError, match="side b has 4 events in 3 runs"):
        rate_difference(0, 3, 4, 3)
