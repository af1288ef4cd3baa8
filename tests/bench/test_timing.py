"""ffnbench.bench.timing: interleaved repetitions, paired ratios, quartiles, timed calls, the CPU's load."""

import pytest
import torch

from ffnbench.bench import timing


def test_quartiles_median_iqr_and_count():
    s = timing.quartiles([4.0, 1.0, 3.0, 2.0, 5.0])
    assert s == {"median": 3.0, "iqr": 2.0, "q1": 2.0, "q3": 4.0, "min": 1.0, "max": 5.0, "n": 5}
    assert timing.quartiles([7])["iqr"] == 0.0 and timing.quartiles([7])["median"] == 7.0
    with pytest.raises(ValueError):
        timing.quartiles([])


def test_interleaved_alternates_the_order_every_round():
    calls = []
    trials = {name: (lambda name=name: calls.append(name) or len(calls)) for name in "ABC"}
    results = timing.interleaved(trials, reps=3)
    assert calls == list("ABC" "CBA" "ABC")
    assert results == {"A": [1, 6, 7], "B": [2, 5, 8], "C": [3, 4, 9]}


def test_paired_ratios_pair_repetitions():
    assert timing.paired_ratios([2.0, 3.0], [1.0, 4.0]) == [2.0, 0.75]
    with pytest.raises(ValueError):
        timing.paired_ratios([1.0], [1.0, 2.0])


def test_time_call_divides_the_clock_by_the_inner_calls():
    now = [10.0]

    def call():  # each call takes 0.25 s of the fake clock
        now[0] += 0.25

    seconds = timing.time_call(call, torch.device("cpu"), inner=4, clock=lambda: now[0])
    assert now[0] == 11.0 and seconds == 0.25


def test_cpu_ticks_sum_all_fields_and_count_iowait_as_idle(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 20 0 3 0 0 0\ncpu0 50 2 25 400 10 0 1 0 0 0\n")
    assert timing.cpu_ticks(stat) == (978, 820)
    stat.write_text("garbage\n")
    assert timing.cpu_ticks(stat) is None
    assert timing.cpu_ticks(tmp_path / "missing") is None
