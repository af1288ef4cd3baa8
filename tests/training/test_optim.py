"""The schedule: linear warmup, then cosine to the floor at the last step."""

import itertools

import pytest

from ffnbench.training.optim import lr_factor


def test_warmup_then_cosine_to_the_floor_at_the_last_step():
    # A run of 110 steps takes optimizer steps 0 … 109: warmup peaks at step 9, the floor is reached at step 109.
    factors = [lr_factor(s, warmup_steps=10, total_steps=110, min_ratio=0.1) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == 1.0  # the warmup's end
    assert all(a < b for a, b in itertools.pairwise(factors[:10]))  # rising during warmup
    assert all(a > b for a, b in itertools.pairwise(factors[9:110]))  # then falling, every step
    assert factors[59] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the cosine (50 of 100 steps)
    assert factors[109] == 0.1 and factors[110] == 0.1  # the last step runs at the floor, exactly


@pytest.mark.parametrize(("warmup", "total"), [(0, 1), (0, 2), (0, 400), (1, 2), (40, 400), (50, 51)])
def test_the_schedule_ends_at_the_floor_whatever_its_length(warmup, total):
    factors = [lr_factor(s, warmup, total, 0.145) for s in range(total)]
    assert max(factors) == 1.0 and factors[max(warmup - 1, 0)] == 1.0
    if total > 1:
        assert factors[-1] == 0.145
