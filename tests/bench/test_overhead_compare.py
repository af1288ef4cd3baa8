"""ffnbench.bench.overhead_compare: the GPU-sized step is chosen by the hand-loop step times measured here."""

import pytest

from ffnbench.bench import overhead, overhead_compare


@pytest.mark.parametrize(("steps_ms", "expected", "tried"), [
    # micro inside the range, tiny above it: the search stops at tiny; micro is nearer the middle (4.47 ms)
    ({("micro", None): 5.0, ("tiny", None): 150.0}, ("micro", None), ["micro", "tiny"]),
    # a GPU: micro below the range, tiny and small inside it; small is nearer the middle
    ({("micro", None): 1.0, ("tiny", None): 2.5, ("small", None): 6.0}, ("small", None), ["micro", "tiny", "small"]),
    # a slow machine: even micro is above the range at the user's batch; its batch is halved until below the middle,
    # and the nearest to the middle is taken
    ({("micro", None): 40.0, ("micro", 16): 21.0, ("micro", 8): 9.0, ("micro", 4): 5.5, ("micro", 2): 4.0},
     ("micro", 2), ["micro", "micro (batch 16)", "micro (batch 8)", "micro (batch 4)", "micro (batch 2)"]),
    ({("micro", None): 12.0, ("micro", 16): 6.0, ("micro", 8): 3.0}, ("micro", 16),
     ["micro", "micro (batch 16)", "micro (batch 8)"]),
])
def test_the_gpu_sized_step_is_chosen_by_measured_step_time(monkeypatch, quick_session, steps_ms, expected, tried):
    monkeypatch.setattr(overhead_compare, "hand_step_ms", lambda session, model, batch=None: steps_ms[(model, batch)])
    model, batch, measured = overhead_compare.choose_gpu_sized(quick_session, overhead.SIZES["cpu"].gpu_sized)
    assert (model, batch) == expected and list(measured) == tried
