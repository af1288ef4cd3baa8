"""Each instability detector against known answers on synthetic curves: clean, plateau, spike, divergence; and
the thresholds' bad input."""

import math

import pytest

from ffnbench.errors import ConfigError
from ffnbench.runs.instability import Instability, Thresholds, detect, failed_to_learn, no_learning, plateau, spikes

T = Thresholds(plateau_margin=0.45, plateau_after=2.5, spike_margin=0.3)
UNIGRAM = 3.30
WARMUP = 40


def falling(steps, start=5.5, end=2.0, rate=0.01):
    """A clean curve: exponential decay from `start` towards `end`."""
    return [(s, end + (start - end) * math.exp(-rate * s)) for s in steps]


VAL_STEPS = range(0, 601, 50)
TRAIN_STEPS = range(9, 600, 10)


def test_a_clean_run_has_no_instability():
    found = detect(status="finished", steps=600, val_curve=falling(VAL_STEPS, rate=0.03),
                   train_curve=falling(TRAIN_STEPS, rate=0.03), unigram_loss=UNIGRAM, warmup_steps=WARMUP,
                   thresholds=T)
    assert found == []


def test_a_loss_still_near_the_unigram_loss_after_warmup_is_a_plateau_with_its_end_and_length():
    # stuck at 3.0 (within 0.45 of 3.30) until step 150, then learning
    val = [(0, 5.5), (50, 3.1), (100, 3.0), (150, 2.95), (200, 2.6), (250, 2.4)]
    assert plateau(val, UNIGRAM, WARMUP, T) == Instability("plateau", 150, 110.0, recovered=True)
    # the same curve, healthy by step 100 (2.7 is more than 0.45 below 3.30): no plateau
    assert plateau([(0, 5.5), (50, 3.1), (100, 2.7), (150, 2.5)], UNIGRAM, WARMUP, T) is None
    # a loss near the unigram loss during warmup is not judged: the first checkpoint judged is at 2.5 warmups
    assert plateau([(0, 5.5), (50, 3.2), (100, 2.6)], UNIGRAM, WARMUP, T) is None
    # never leaves it: not recovered
    assert plateau([(0, 5.5), (100, 3.1), (200, 3.0)], UNIGRAM, WARMUP, T) == Instability("plateau", 200, 160.0, False)
    assert plateau(val, None, WARMUP, T) is None  # no unigram loss: not judged


def test_a_rise_above_the_running_minimum_that_comes_back_is_a_spike_of_its_height():
    train = [(40, 3.0), (50, 2.8), (60, 2.7), (70, 3.1), (80, 3.4), (90, 2.9), (100, 2.6), (110, 2.5)]
    assert spikes(train, WARMUP, T) == [Instability("spike", 80, pytest.approx(0.7), recovered=True)]
    small = [(40, 3.0), (50, 2.8), (60, 2.7), (70, 2.95), (80, 2.6)]  # +0.25: within the margin
    assert spikes(small, WARMUP, T) == []
    never = [(40, 3.0), (50, 2.7), (60, 3.2), (70, 3.3)]
    assert spikes(never, WARMUP, T) == [Instability("spike", 70, pytest.approx(0.6), recovered=False)]
    during_warmup = [(10, 5.0), (20, 3.0), (30, 4.0), (40, 2.9), (50, 2.8)]  # warmup steps are not judged
    assert spikes(during_warmup, WARMUP, T) == []


def test_two_spikes_are_two_and_a_divergence_is_not_a_spike():
    train = [(40, 3.0), (50, 2.5), (60, 3.0), (70, 2.5), (80, 2.4), (90, 2.9), (100, 2.4)]
    assert [(i.step, round(i.size, 3)) for i in spikes(train, WARMUP, T)] == [(60, 0.5), (90, 0.5)]
    found = detect(status="diverged", steps=70, val_curve=[(0, 5.5), (50, 2.8)],
                   train_curve=[(40, 3.0), (50, 2.8), (60, 2.8), (70, math.nan)], unigram_loss=UNIGRAM,
                   warmup_steps=WARMUP, thresholds=T)
    assert found == [Instability("diverged", 70, None, recovered=False)]


def test_without_a_training_curve_spikes_are_read_off_the_validation_curve():
    val = [(0, 5.5), (50, 2.8), (100, 2.6), (150, 3.2), (200, 2.5)]
    found = detect(status="finished", steps=200, val_curve=val, train_curve=None, unigram_loss=UNIGRAM,
                   warmup_steps=WARMUP, thresholds=T)
    assert [(i.kind, i.step) for i in found] == [("spike", 150)]


@pytest.mark.parametrize("bad, match", [
    ({"plateau_margin": 0}, r"instability.plateau_margin: must be a number in \(0, 5\]"),
    ({"spike_margin": -1}, "instability.spike_margin"),
    ({"plateau_after": 0.5}, "at least 1 warmup"),
    ({"spike_margin": "big"}, "instability.spike_margin"),
    ({"spikes": 1}, "instability.spikes: unknown setting"),
])
def test_thresholds_out_of_range_are_refused_in_one_line(bad, match):
    with pytest.raises(ConfigError, match=match):
        Thresholds.from_config(bad)


LN_V = math.log(256)  # the uniform loss over bytes


def test_a_finished_run_worse_than_chance_did_not_learn_whatever_its_length():
    # lr 3.0 on the micro model: 60 steps (past a 50-step warmup) end at 86.74 nats, 30 (inside it) at 260.96
    found = detect(status="finished", steps=60, val_curve=[(0, 5.53), (60, 86.74)], train_curve=[(9, 6.0), (59, 80.0)],
                   unigram_loss=UNIGRAM, warmup_steps=50, thresholds=T, final_loss=86.74, uniform_loss=LN_V)
    assert found == [Instability("no_learning", 60, 86.74, recovered=False)]
    assert found[0].describe() == "no learning (final loss 86.74 nats at step 60)"
    inside = dict(status="finished", steps=30, uniform_loss=LN_V, unigram_loss=UNIGRAM, warmup_steps=50, t=T)
    assert no_learning(final_loss=260.96, **inside) == Instability("no_learning", 30, 260.96, recovered=False)
    # just better than chance inside the warmup: nothing is judged against the unigram loss before warmup ends
    assert no_learning(final_loss=5.5, **inside) is None
    # only a finished run has ended: an interrupted, failed or diverged one is not judged (a divergence says itself)
    for status in ("interrupted", "failed", "diverged"):
        assert no_learning(**{**inside, "status": status}, final_loss=260.96) is None
    assert no_learning(final_loss=None, **inside) is None and no_learning(final_loss=math.nan, **inside) is None
    # without the uniform loss (a caller that does not give it) nothing is judged against it
    assert detect(status="finished", steps=30, val_curve=[(0, 5.5), (30, 260.0)], train_curve=None,
                  unigram_loss=UNIGRAM, warmup_steps=50, thresholds=T, final_loss=260.0) == []


def test_a_run_past_warmup_but_too_short_for_a_plateau_that_ends_near_the_unigram_loss_did_not_learn():
    # warmup 40: a plateau is judged from step 2.5 x 40 = 100 on; a run that ends before, past its warmup, still
    # within 0.45 nats of the unigram loss (3.30) did not learn
    short = dict(status="finished", uniform_loss=LN_V, unigram_loss=UNIGRAM, warmup_steps=WARMUP, t=T)
    assert no_learning(steps=60, final_loss=3.0, **short) == Instability("no_learning", 60, 3.0, recovered=False)
    assert no_learning(steps=60, final_loss=2.8, **short) is None  # more than 0.45 nats below it: it learned
    assert no_learning(steps=40, final_loss=3.0, **short) is None  # the run ended with its warmup: not judged
    assert no_learning(steps=60, final_loss=3.0, **{**short, "unigram_loss": None}) is None  # no corpus figure
    # long enough for a plateau: the plateau (not recovered) says it, not a second kind
    found = detect(status="finished", steps=200, val_curve=[(0, 5.5), (100, 3.1), (200, 3.0)], train_curve=None,
                   unigram_loss=UNIGRAM, warmup_steps=WARMUP, thresholds=T, final_loss=3.0, uniform_loss=LN_V)
    assert found == [Instability("plateau", 200, 160.0, recovered=False)]


def test_failed_to_learn_judges_a_record_from_its_own_numbers_whatever_it_recorded():
    from ffnbench.runs.result import RunResult

    record = RunResult(status="finished", steps=60, config={"optim": {"warmup_steps": 50}},
                       model={"vocab_size": 256}, metrics={"final_val_loss": 86.74}, instabilities=[])
    assert failed_to_learn(record)  # above ln 256, though its record (written before the kind) lists nothing
    assert not failed_to_learn(record.replace(metrics={"final_val_loss": 3.0}))  # no unigram loss: only chance
    assert failed_to_learn(record.replace(metrics={"final_val_loss": 3.0}, data={"unigram_loss": UNIGRAM}))
    assert not failed_to_learn(record.replace(metrics={"final_val_loss": 2.0}, data={"unigram_loss": UNIGRAM}))
    assert not failed_to_learn(record.replace(status="diverged", metrics={"final_val_loss": None}))
    # the thresholds of the record's config: a wider margin takes 2.0 for near the unigram loss
    wide = {"optim": {"warmup_steps": 50}, "instability": {"plateau_margin": 1.5}}
    assert failed_to_learn(record.replace(metrics={"final_val_loss": 2.0}, data={"unigram_loss": UNIGRAM}, config=wide))
