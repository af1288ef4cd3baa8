"""The two contenders the benchmarks time against each other: the real pipeline (`ffnbench.train.train()`, as a
user's run) and the minimal hand-written PyTorch loop over the same model, batches, optimizer and clipping."""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator

import torch
from omegaconf import DictConfig

from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import time_call
from ffnbench.runs.result import RunResult
from ffnbench.training.step import clip_gradients, train_step
from ffnbench.training.throughput import sync


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Swallow what train() and Lightning print (shown if the run fails)."""
    buffer = io.StringIO()
    names = ("lightning.pytorch", "lightning.fabric", "lightning")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield buffer
    except BaseException:
        sys.stderr.write(buffer.getvalue()[-4000:])
        raise
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def run_train(cfg, callbacks: list) -> RunResult:
    """`ffnbench.train.train(cfg, callbacks)`, its record as a RunResult."""
    from ffnbench.train import train

    return train(cfg, callbacks=callbacks)


def pipeline_overrides(session: BenchSession, model: str, batch_size: int | None = None) -> list[str]:
    """The user's command for this model on this device (progress bar on), with the CSV logger only, plus what keeps
    a benchmark run short: a small fixed validation set of whole training batches (val_set_tokens), and validation
    and checkpoints only outside the timed window (at step 0 and at the end). Not wandb: its threads outlive the run
    (an asyncio loop, telemetry exporters) and would perturb every later measurement in this process; its start-up
    is measured by the startup benchmark."""
    val_tokens = val_set_tokens(session, model, batch_size)
    return [
        f"model={model}",
        *session.trainer_overrides(),
        "logger=csv",
        "trainer.val_every=1000000",
        "trainer.ckpt_every=1000000",
        f"data.val_tokens={val_tokens}",
        f"data.final_val_tokens={val_tokens}",  # the final validation is not timed: keep it short
        f"data.cache_dir={session.cache_dir}",
        *([f"data.batch_size={batch_size}"] if batch_size else []),
    ]


@functools.cache
def batch_shape(model: str, batch_size: int | None = None) -> tuple[int, int]:
    """(global batch, seq_len) of a training batch of the model preset `model` at `batch_size` (None: the user's)."""
    from ffnbench.config.compose import compose

    cfg = compose([f"model={model}", *([f"data.batch_size={batch_size}"] if batch_size else [])])
    return int(cfg.data.batch_size), int(cfg.model.seq_len)


def val_set_tokens(session: BenchSession, model: str, batch_size: int | None = None) -> int:
    """A benchmark run's validation set: session.val_tokens rounded up to whole training batches, as a sweep's sets
    are (conf/experiment/_gpu.yaml), so that a validation pass times what a sweep's does. (Validation runs eager, so
    its shapes compile nothing; while it was compiled, a set smaller than a batch made dynamo recompile the blocks
    with a symbolic batch, and the run trained on that graph.)"""
    batch, seq_len = batch_shape(model, batch_size)
    return -(-session.val_tokens // (batch * seq_len)) * batch * seq_len


def whole_batches(overrides: list[str], *steps: int) -> tuple[int, ...]:
    """(k, *steps rounded up to multiples of k): k is the optimizer steps per Lightning batch in a run of `overrides`
    (trainer.inner_steps as train() resolves it). A hook at a batch's end sees only every k-th step, so the
    benchmarks time stretches of whole batches."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import trainer_config

    k = trainer_config(compose([*overrides, "trainer.max_steps=1"]).trainer).steps_per_batch()
    return (k, *(-(-n // k) * k for n in steps))


def _step_clock(device: torch.device, first: int, last: int):
    import lightning as L

    class StepClock(L.Callback):
        """perf_counter at the end of optimizer steps `first` and `last`, each the end of a batch (device synchronized
        there only)."""

        def __init__(self) -> None:
            self.times: dict[int, float] = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            step = trainer.global_step
            if step in (first, last):
                sync(device)
                self.times[step] = time.perf_counter()

        def tokens_per_s(self, tokens_per_step: int) -> float:
            if set(self.times) != {first, last}:
                raise RuntimeError(f"benchmark run: steps {first} and {last} were not both timed ({self.times})")
            return (last - first) * tokens_per_step / (self.times[last] - self.times[first])

    return StepClock()


_RUN_NUMBERS = itertools.count()


class Pipeline:
    """One repetition = one `ffnbench.train.train(cfg)` call, exactly as a user's run (same Trainer, module,
    callbacks, loggers, data module), timed from the end of step `warmup` to the end of step `warmup + steps`, both
    rounded up to whole batches (inner_steps). Returns tokens/s; `last_result` is the last run's record,
    `monitor_readings` what its ThroughputMonitor said."""

    def __init__(self, session: BenchSession, overrides: list[str], warmup: int, steps: int):
        from ffnbench.config.compose import compose

        _, warmup, steps = whole_batches(overrides, warmup, steps)
        self.session, self.overrides, self.warmup, self.steps = session, overrides, warmup, steps
        self.cfg = compose([*overrides, f"trainer.max_steps={warmup + steps}", f"run_dir={session.work / 'unused'}"])
        self.batch_size, self.seq_len = int(self.cfg.data.batch_size), int(self.cfg.model.seq_len)
        self.tokens_per_step = self.batch_size * self.seq_len
        self.monitor_readings: list[float] = []
        self.last_result: RunResult | None = None

    def __call__(self) -> float:
        from ffnbench.config.compose import compose

        run_dir = self.session.work / "runs" / f"pipeline-{next(_RUN_NUMBERS)}"  # always a fresh run, never a resume
        cfg = compose([*self.overrides, f"trainer.max_steps={self.warmup + self.steps}", f"run_dir={run_dir}"])
        clock = _step_clock(self.session.device, self.warmup, self.warmup + self.steps)
        with quiet():
            result = run_train(cfg, [clock])
        if result.status != "finished" or result.resumed_from_step is not None:
            raise RuntimeError(f"benchmark run {run_dir} ended {result.status}: {result.error}")
        self.last_result = result
        if result.throughput and result.throughput.get("tokens_per_s"):
            self.monitor_readings.append(result.throughput["tokens_per_s"])
        return clock.tokens_per_s(self.tokens_per_step)


class Alternation:
    """The pipeline and the hand loop timed side by side inside one `train()` run, a batch at a time, as a Lightning
    callback: after `warmup` steps of each, every batch of the pipeline (`k` steps, trainer.inner_steps; timed from
    the end of this hook's previous call to the start of this one, so it holds all of Lightning's work for the
    batch) is followed by `k` timed steps of the hand loop, run inside the hook. The two take turns every few
    milliseconds, so whatever else loads the machine, slow drift or a burst, hits both alike; each of the `windows`
    windows sums `window` steps of each (window / k turns), and the ratio of a window's two sums is paired.

    Args:
        loop: the hand loop (its own model, optimizer and batches); it takes as many steps as the pipeline.
        warmup: steps of each before the first window (compile, caches, the allocator).
        window: timed steps of each per window (a multiple of k).
        windows: windows.
        k: the pipeline's steps per batch (its inner_steps), and the hand loop's steps per turn.
    """

    def __init__(self, loop: HandLoop, warmup: int, window: int, windows: int, k: int = 1):
        import lightning as L

        if warmup % k or window % k or window <= 0:
            raise ValueError(f"warm-up {warmup} and window {window} must be positive multiples of the batch, {k} steps")
        self.loop, self.device = loop, loop.device
        self.warmup, self.window, self.windows, self.k = warmup, window, windows, k
        self.total_steps = warmup + windows * window
        self.hand_s: list[float] = []  # seconds per step, one per window
        self.pipeline_s: list[float] = []
        self._sums = [0.0, 0.0, 0]  # this window's pipeline seconds, hand-loop seconds, steps
        self._t: float | None = None  # when the pipeline's current batch started
        outer = self

        class Hook(L.Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
                outer._turn(trainer.global_step)

        self.callback = Hook()
        self.result: RunResult | None = None  # the run's record and config, once alternate() has run it
        self.cfg: DictConfig | None = None

    def _turn(self, step: int) -> None:
        """At the end of the pipeline's batch that ended at `step`: book it, then the hand loop's turn."""
        if step < self.warmup:
            return
        sync(self.device)
        now = time.perf_counter()
        if self._t is None:  # the warm-up's end: the hand loop's warm-up too, untimed
            for _ in range(self.warmup):
                self.loop.step()
        else:
            self._sums[0] += now - self._t
            self._sums[1] += self.k * time_call(self.loop.step, self.device, inner=self.k)
            self._sums[2] += self.k
            if self._sums[2] == self.window:
                self.pipeline_s.append(self._sums[0] / self.window)
                self.hand_s.append(self._sums[1] / self.window)
                self._sums = [0.0, 0.0, 0]
        sync(self.device)
        self._t = time.perf_counter()

    def tokens_per_s(self) -> dict[str, list[float]]:
        """Tokens/s of each contender, window by window (round k of each list is one pair)."""
        if len(self.hand_s) != self.windows or len(self.pipeline_s) != self.windows:
            raise RuntimeError(f"benchmark run: {len(self.pipeline_s)} pipeline and {len(self.hand_s)} hand-loop "
                               f"windows timed of {self.windows}")
        tps = self.loop.tokens_per_step
        return {"hand": [tps / s for s in self.hand_s], "pipeline": [tps / s for s in self.pipeline_s]}


def alternate(session: BenchSession, overrides: list[str], warmup: int, window: int, windows: int) -> Alternation:
    """One `train()` run of `overrides` with the hand loop alternating inside it: the Alternation, done, with the
    run's record (`result`) and composed config (`cfg`) attached. The hand loop compiles as the config says
    (trainer.compile, trainer.compile_mode). `warmup` and `window` are rounded up to whole batches of the run
    (inner_steps), as the Alternation records them.

    Args:
        session: the device; the run's directory goes under its work folder.
        overrides: the user's command (pipeline_overrides), plus any trainer options under test, e.g.
            `trainer.compile_mode=reduce-overhead`.
        warmup, window, windows: as Alternation takes them.
    """
    from ffnbench.config.compose import compose

    k, warmup, window = whole_batches(overrides, warmup, window)
    steps = warmup + windows * window
    run_dir = session.work / "runs" / f"alternate-{next(_RUN_NUMBERS)}"  # always a fresh run, never a resume
    cfg = compose([*overrides, f"trainer.max_steps={steps}", f"run_dir={run_dir}"])
    loop = HandLoop(session, cfg, compile=bool(cfg.trainer.compile), compile_mode=str(cfg.trainer.compile_mode))
    alternation = Alternation(loop, warmup, window, windows, k)
    with quiet():
        result = run_train(cfg, [alternation.callback])
    if result.status != "finished" or result.resumed_from_step is not None:
        raise RuntimeError(f"benchmark run {run_dir} ended {result.status}: {result.error}")
    alternation.result, alternation.cfg = result, cfg
    return alternation


class HandLoop:
    """The minimal PyTorch training loop the pipeline is measured against: the same GPT, the same batches (the
    data module's windows), the same optimizer step (step.train_step, which LMModule calls too), the same AdamW and
    schedule (training.optim.build_optimizer), the same gradient clipping,
    autocast (bf16, or fp16 with a gradient scaler before Ampere) and compiled blocks on a GPU as the pipeline has
    there, and the loss read once per logging window, as any loop that prints its loss does. Nothing else: no
    hooks, no logging, no checkpoints.

    Args:
        session: the device and precision.
        cfg: the run's composed config (model, data, optim, trainer, seed).
        mcfg: a model config to train instead of the one `cfg` gives (the variants benchmark swaps the FFN).
        batches: batch i → (x, y); default: `data_batches(cfg)`.
        compile: compile each block in place; default: on a GPU, as trainer=gpu does.
        compile_mode: how (model.compile_blocks): default, or reduce-overhead (CUDA graphs).
    """

    def __init__(self, session: BenchSession, cfg, mcfg=None, batches: Callable[[int], tuple] | None = None,
                 compile: bool | None = None, compile_mode: str = "default"):
        from ffnbench.config.schema import model_config
        from ffnbench.data.tokenizer import vocab_size_for
        from ffnbench.model.model import GPT, compile_blocks
        from ffnbench.training.optim import build_optimizer

        self.session, self.device = session, session.device
        self.mcfg = mcfg or model_config(cfg, vocab_size_for(cfg.data))
        self.optim = dict(cfg.optim)
        self.log_every = int(cfg.trainer.log_every)
        self.total_steps = int(cfg.trainer.max_steps or 1000)
        self.model = GPT(self.mcfg, seed=int(cfg.seed), loss_chunk=cfg.trainer.get("loss_chunk")).to(self.device)
        compiled = session.gpu if compile is None else compile
        if compiled:
            torch._dynamo.reset()  # a fresh loop compiles afresh, as a fresh run: no earlier loop's cache or limit
            compile_blocks(self.model, compile_mode)
        self.cuda_graphs = compiled and compile_mode == "reduce-overhead"
        self.params = list(self.model.parameters())  # listed once, as the training module lists them for clipping
        self.optimizer, self.scheduler = build_optimizer(self.model, self.optim, self.total_steps, self.device)
        # fp16 needs its loss scaled (and the gradients unscaled before clipping); disabled, it changes nothing
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=session.precision == "16-mixed")
        self.batches = batches or data_batches(cfg, self.mcfg.seq_len, pin=session.gpu)
        self.tokens_per_step = int(cfg.data.batch_size) * self.mcfg.seq_len
        self.i = 0
        self.loss: torch.Tensor | None = None

    def _backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def _update(self) -> None:
        self.scaler.unscale_(self.optimizer)
        clip_gradients(self.params, self.optim.get("grad_clip"))
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def step(self) -> None:
        x, y = self.batches(self.i)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        # the pipeline's own step (LMModule calls it too): forward, backward, clip, AdamW, schedule
        loss = train_step(self.model, x, y, optimizer=self.optimizer, scheduler=self.scheduler,
                          backward=self._backward, step=self._update, z_loss=self.optim.get("z_loss") or 0.0,
                          cuda_graphs=self.cuda_graphs, forward_context=self.session.autocast())
        self.loss = loss.detach()
        if (self.i + 1) % self.log_every == 0:  # as often as the pipeline reads it
            loss.item()
        self.i += 1

    def run(self, warmup: int, steps: int) -> float:
        """Tokens/s over `steps` steps after `warmup` steps."""
        for _ in range(warmup):
            self.step()
        seconds = time_call(self.step, self.device, inner=steps)
        return self.tokens_per_step / seconds


def data_batches(cfg, seq_len: int, pin: bool = False) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """Training batch i of this config: the same windows the pipeline's data module serves (page-locked for a GPU,
    as the data module's loader pins them there)."""
    from ffnbench.data import LMDataModule, TokenWindows, TrainBatches

    dm = LMDataModule(cfg.data, seq_len=seq_len, seed=int(cfg.seed))
    dm.prepare_data()
    dm.setup("fit")
    stream = TrainBatches(TokenWindows(dm.train_tokens, seq_len), int(cfg.seed), int(cfg.data.batch_size))

    def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = stream.batch(i)
        return (x.pin_memory(), y.pin_memory()) if pin else (x, y)

    return batch


def hand_trial(session: BenchSession, cfg, warmup: int, steps: int) -> Callable[[], float]:
    """Tokens/s of a fresh hand loop per repetition (like a fresh run), warm-up steps excluded."""
    batches = data_batches(cfg, int(cfg.model.seq_len), pin=session.gpu)

    def trial() -> float:
        loop = HandLoop(session, cfg, batches=batches)
        return loop.run(warmup, steps)

    return trial
