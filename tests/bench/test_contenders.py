"""ffnbench.bench.contenders: the pipeline and the hand loop are timed side by side and train the same thing."""

from types import SimpleNamespace

import pytest
import torch

from ffnbench.bench import contenders, timing
from ffnbench.bench.contenders import HandLoop, Pipeline, pipeline_overrides


class CountingLoop:
    """What Alternation asks of a hand loop: a device, tokens per step, and steps (counted; each one advances the
    fake clock by `seconds`)."""

    def __init__(self, clock, seconds):
        self.device, self.tokens_per_step, self.steps = torch.device("cpu"), 64, 0
        self.clock, self.seconds = clock, seconds

    def step(self):
        self.steps += 1
        self.clock[0] += self.seconds


def test_alternation_times_both_contenders_in_every_round_and_trains_the_hand_loop_as_long(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(contenders.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    loop = CountingLoop(clock, seconds=1.0)  # the hand loop: 1 s a step; the pipeline: 2 s a step (below)
    run = contenders.Alternation(loop, warmup=4, window=6, windows=5, k=2)
    monkeypatch.setattr(contenders, "time_call", lambda fn, device, inner: timing.time_call(
        fn, device, inner, clock=lambda: clock[0]))
    for step in range(2, run.total_steps + 1, 2):  # the pipeline's batches of 2 steps, as Lightning calls the hook
        clock[0] += 2.0 * 2
        run.callback.on_train_batch_end(SimpleNamespace(global_step=step), None, None, None, step // 2 - 1)
    assert run.total_steps == 4 + 5 * 6 and loop.steps == run.total_steps  # same length
    assert run.tokens_per_s() == {"hand": [64 / 1.0] * 5, "pipeline": [64 / 2.0] * 5}  # warm-up not timed
    with pytest.raises(ValueError, match="multiples of the batch, 4 steps"):
        contenders.Alternation(loop, warmup=4, window=6, windows=5, k=4)


def test_hand_loop_trains_exactly_what_the_pipeline_trains(quick_session):
    """Same model, batches, AdamW, schedule and clipping: the hand loop's loss at the last step equals, bit for bit,
    the one the pipeline's train() records."""
    pipeline = Pipeline(quick_session, pipeline_overrides(quick_session, "micro"), 2, 13)
    assert (pipeline.warmup, pipeline.steps) == (10, 20)  # whole batches of trainer.inner_steps (10)
    assert pipeline() > 0
    assert pipeline.last_result.steps == 30
    loop = HandLoop(quick_session, pipeline.cfg)
    for _ in range(30):
        loop.step()
    assert loop.loss.item() == pipeline.last_result.metrics["final_train_loss"]


def test_token_windows_read_the_corpus_without_copying_it(quick_session):
    from ffnbench.data import LMDataModule, TokenWindows

    cfg = Pipeline(quick_session, pipeline_overrides(quick_session, "micro"), 0, 1).cfg
    dm = LMDataModule(cfg.data, seq_len=32, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    windows = TokenWindows(dm.train_tokens, 32)
    assert windows._view.data_ptr() == dm.train_tokens.ctypes.data  # a view of the memory map, not a copy
    x, y = windows(torch.tensor([0, 5]))
    assert torch.equal(x[:, 1:], y[:, :-1]) and x.shape == (2, 32)
