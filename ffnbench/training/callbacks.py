"""What a run plugs into Lightning's Trainer besides the module: the periodic atomic checkpoint (also written when
the run is stopped by SIGTERM or Ctrl-C), the pre-emption signal of SLURM jobs, the progress bar drawn every N
steps, the profiler that costs nothing, and the step-time marks the startup benchmark reads.

Lightning calls every callback's hooks on every step whether it overrides them or not; the callbacks here do their
work on the steps that need it and return at once on the others (the per-step cost is `make bench`'s overhead
benchmark)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ffnbench.ddp import global_rank
from ffnbench.training.readout import Readout, defers


class PeriodicCheckpoint(L.Callback):
    """checkpoints/last.ckpt (rundir.last_checkpoint) every `every` steps and at the end, written atomically (a
    kill mid-write leaves the previous checkpoint intact); also written when the run is stopped by SIGTERM (every
    rank) or Ctrl-C (one process). On a step that also validates, it is written after the validation, so the
    checkpoint holds that step's record."""

    def __init__(self, path: Path, every: int, val_every: int):
        self.path = path
        self.every = max(1, int(every))
        self.val_every = max(1, int(val_every))
        self.saved_step = -1

    def save(self, trainer: L.Trainer) -> None:
        if trainer.global_step == self.saved_step:
            return
        flush = getattr(trainer.lightning_module, "flush_rows", None)
        if flush is not None:  # the module's rows up to this step, the deferred one and this batch's, written ...
            flush()
        for logger in trainer.loggers:  # ... and on disk first (metrics.csv, wandb: loggers.log_row)
            logger.save()
        tmp = self.path.with_suffix(".ckpt.tmp")
        try:
            trainer.save_checkpoint(tmp, weights_only=False)  # every rank calls it; rank 0 writes
        except BaseException:
            # a write that failed (a full disk) leaves no partial file taking space; the previous checkpoint stays
            if trainer.is_global_zero:
                tmp.unlink(missing_ok=True)
            raise
        if trainer.is_global_zero:
            os.replace(tmp, self.path)
        trainer.strategy.barrier("ffnbench-checkpoint")
        self.saved_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every == 0 and step % self.val_every != 0:
            self.save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" and trainer.global_step % self.every == 0:
            self.save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if pl_module.status == "running":
            self.save(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        # SIGTERM (a scheduler's pre-emption or time limit; PreemptionSignal turns submitit's signal into it): Lightning
        # stops every rank at the end of the same batch (after its validation) and raises SIGTERMException
        # there, so all ranks save that step together. Stopped inside a validation, the previous checkpoint stays.
        # Ctrl-C lands anywhere, also inside a step's update: only a model, optimizer and schedule that all stand at
        # trainer.global_step are saved (else the previous checkpoint stays, and the rerun resumes from it).
        sigterm = isinstance(exception, SIGTERMException) and trainer.training
        ctrl_c = isinstance(exception, KeyboardInterrupt) and trainer.world_size == 1 and _between_steps(trainer)
        if sigterm or ctrl_c:
            self.save(trainer)


def _between_steps(trainer: L.Trainer) -> bool:
    """Whether the learning-rate schedules and the optimizers' own step counts agree with trainer.global_step (the
    optimizers' only without a loss scaler: fp16 skips the update of a step whose gradient overflowed)."""
    step = trainer.global_step
    if any(config.scheduler.last_epoch != step for config in trainer.lr_scheduler_configs):
        return False
    if getattr(trainer.precision_plugin, "scaler", None) is None:
        for optimizer in trainer.optimizers:
            state = next(iter(optimizer.state.values()), {})
            if "step" in state and int(state["step"]) != step:
                return False
    return True


PREEMPT_SIGNAL_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # submitit's setting: the signal it sends before a time limit


class PreemptionSignal(L.Callback):
    """SIGTERM (a scheduler's pre-emption or time limit) and submitit's pre-emption signal (USR2, or what
    SUBMITIT_PREEMPT_SIGNAL names, which SLURM sends a job `signal_delay_s` before its time limit): during fit, either
    only sets a flag — no collective and no exception inside a signal handler. At the start of every batch the ranks
    agree on it (one all-reduce of one number under DDP; a signal reaches the ranks of a job milliseconds apart, and
    each deciding alone would leave one rank in the checkpoint barrier while another trains), and every rank raises
    SIGTERMException at that same batch, after the previous one ended: PeriodicCheckpoint saves that step. Lightning's
    own SIGTERM handling is replaced for the fit (2.4–2.5 raise on each rank at its own batch end; 2.6 broadcasts
    inside the handler), and so is its broadcast of rank 0's flag at every batch (a host sync under DDP). Once the
    run is recorded, `forward()` hands submitit's signal to the handler it replaced (submitit's: requeue; the requeued
    job resumes from the checkpoint)."""

    def __init__(self):
        name = os.environ.get(PREEMPT_SIGNAL_ENV, "USR2")
        self.signum = getattr(signal, f"SIG{name}", signal.SIGUSR2)
        self.received: tuple[int, Any] | None = None  # (signum, frame) of the pre-emption signal received during fit
        self.flagged = False  # a stop was asked for in this process (either signal)
        self._previous: dict[int, Any] = {}  # the handlers replaced for the fit, restored after it
        self._handed: Any = None  # the pre-emption signal's handler before the fit (submitit's): forward() calls it
        self._pending: Readout | None = None  # the last batch's agreement, where reads are deferred

    def on_train_start(self, trainer, pl_module) -> None:
        # after Lightning registered its handlers for the fit (_SignalConnector), so that ours replace them
        self._install()
        # Lightning ≥ 2.5.2 broadcasts rank 0's SIGTERM flag at every batch's start under DDP and reads it with
        # .item() (training_epoch_loop._broadcast_sigterm_tensor): a host sync that drains a GPU's queue every batch.
        # The agreement here replaces it, and with these handlers Lightning's flag is never set during fit; one set
        # before them (a signal during fit's setup) is taken over, so every rank stops at the same batch.
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if hasattr(loop, "_broadcast_sigterm_tensor"):
            loop._broadcast_sigterm_tensor = _no_broadcast
        connector = getattr(trainer, "_signal_connector", None)
        if getattr(connector, "received_sigterm", False):
            connector.received_sigterm = False
            self.flagged = True

    def on_validation_start(self, trainer, pl_module) -> None:
        # the step-0 and the final validation run outside fit, under Lightning's handlers (2.6: a broadcast inside
        # the handler): the flag-only handler covers them too; a stop asked for there is taken at the next batch
        # of the fit (none after the final validation: the run is done)
        if _standalone_validation(trainer):
            self._install()

    def on_validation_end(self, trainer, pl_module) -> None:
        if _standalone_validation(trainer):
            self._restore()

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._previous:  # main thread only, once
            return
        for signum in dict.fromkeys((signal.SIGTERM, self.signum)):
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        if self._handed is None:
            self._handed = self._previous[self.signum]

    def _on_signal(self, signum: int, frame: Any) -> None:
        if signum == self.signum and signum != signal.SIGTERM:
            self.received = (signum, frame)
        self.flagged = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._agreed(pl_module):
            raise SIGTERMException()

    def _agreed(self, pl_module) -> bool:
        """Whether any rank was asked to stop: the same answer on every rank, at the same batch."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self.flagged
        flag = torch.tensor([float(self.flagged)], device=pl_module.device)
        dist.all_reduce(flag)
        if not defers(pl_module.device):
            return bool(flag.item())
        # Where reads are deferred (a GPU), the all-reduce queues like any kernel and its result is read a batch
        # later, when the device has passed it: every rank reads the same sum at the same batch, one batch later.
        previous, self._pending = self._pending, Readout({"stop": flag})
        return previous is not None and previous.read()["stop"] > 0

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def on_fit_end(self, trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._restore()

    def forward(self) -> None:
        """Give a signal received during fit to the handler it replaced (a no-op without one)."""
        if self.received is not None and callable(self._handed):
            received, self.received = self.received, None
            self._handed(*received)


def _no_broadcast() -> None:
    """In place of Lightning's per-batch SIGTERM broadcast (PreemptionSignal.on_train_start)."""


def _standalone_validation(trainer) -> bool:
    """trainer.validate(), not the validation a fit runs every val_every steps (whose stage is validating too)."""
    return str(getattr(trainer.state.fn, "value", trainer.state.fn)) == "validate"


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar, redrawn on every `every`-th training step and on the last (the steps that log
    the loss it shows), at most `refresh_rate` times a second: Lightning's own bar updates its task and converts its
    metrics after every step and redraws up to 100 times a second from a thread that holds the GIL meanwhile, a
    cost that a step of a few milliseconds notices. Shows the last logged training loss (LMModule.last_train_loss).

    Args:
        every: redraw every this many training steps (trainer.log_every).
        refresh_rate: the most redraws per second (the drawing thread's rate).
    """

    def __init__(self, every: int, refresh_rate: int = 4):
        super().__init__(refresh_rate=refresh_rate)
        self.every = max(1, int(every))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every == 0 or step >= trainer.max_steps:
            # The bar counts optimizer steps, out of max_steps (total_train_batches); a batch holds trainer.inner_steps
            # of them.
            super().on_train_batch_end(trainer, pl_module, outputs, batch, step - 1)

    @property
    def total_train_batches(self) -> int | float:
        # Lightning's is the steps left (max_steps − the step a resumed run starts at); the bar counts from step 0.
        return self.trainer.max_steps if self.trainer.max_steps and self.trainer.max_steps > 0 else \
            super().total_train_batches

    def _get_train_description(self, current_epoch: int) -> str:
        # Lightning's "Epoch 0/-2": a run is max_steps long (max_epochs=-1), and the bar counts its steps
        return "Step".ljust(len(self.validation_description))

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)  # the logger's version (a wandb id's tail, "5d61"): nothing a reader can use
        loss = getattr(pl_module, "last_train_loss", None)
        if loss is not None:
            metrics["train/loss"] = loss
        return metrics


class NoProfiler(PassThroughProfiler):
    """Profiles nothing, as Lightning's default (PassThroughProfiler) does, but hands back one shared null context
    instead of building a generator-based context manager around each of the ~40 hooks of every step."""

    _NULL = contextlib.nullcontext()

    def profile(self, action_name: str) -> contextlib.nullcontext:
        return self._NULL


STEP_TIMES_ENV = "FFNBENCH_STEP_TIMES"


class StepTimes(L.Callback):
    """When the environment variable FFNBENCH_STEP_TIMES names a file (the startup benchmark of ffnbench.bench
    sets it), train() appends JSON lines {"event", "time"} to it: when train() starts (imports and config done),
    when the data is ready, and when the first training step starts and ends (its optimizer step taken). Without the
    variable this callback is never created, so a normal run pays nothing for it."""

    def __init__(self, path: str):
        self.path = path
        self.seen: set[str] = set()
        self._hook: Any = None  # torch's step post-hook that marks the first step's end, until it has

    @classmethod
    def from_env(cls) -> StepTimes | None:
        path = os.environ.get(STEP_TIMES_ENV)
        return cls(path) if path and global_rank() == 0 else None

    def mark(self, event: str) -> None:
        if event not in self.seen:
            self.seen.add(event)
            with open(self.path, "a") as f:
                f.write(json.dumps({"event": event, "time": time.time(), "pid": os.getpid()}) + "\n")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.mark("first_step_start")
        if "first_step_end" not in self.seen and self._hook is None:
            # A batch holds several optimizer steps (trainer.inner_steps): the first one ends when the optimizer has
            # taken it, which torch's step post-hook sees.
            def first_step_end(optimizer, args, kwargs) -> None:
                self.mark("first_step_end")
                self._hook.remove()

            self._hook = trainer.optimizers[0].register_step_post_hook(first_step_end)


class WorldSizeCheck(L.Callback):
    """Fails a run that trains on another number of processes than it asked for (devices × nodes): a cluster
    environment that believes the processes were made elsewhere would train one and record two. `seen`: the
    world size the trainer ran with (result.json's hardware.world_size)."""

    def __init__(self, expected: int):
        self.expected = expected
        self.seen: int | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.seen = trainer.world_size
        if trainer.world_size != self.expected:
            raise RuntimeError(f"this run asked for {self.expected} processes (trainer.devices × trainer.num_nodes) "
                               f"and {trainer.world_size} started: the cluster environment did not make its ranks; "
                               "run it outside `srun`, or with one SLURM task per device")
