"""The run's callbacks: when the checkpoint is written (and that it replaces the old one whole), when the progress
bar redraws, the profiler that builds nothing per hook, and the startup timestamps the benchmark reads."""

import json
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ffnbench.training.callbacks import (
    PREEMPT_SIGNAL_ENV,
    STEP_TIMES_ENV,
    NoProfiler,
    PeriodicCheckpoint,
    PreemptionSignal,
    StepProgressBar,
    StepTimes,
)


class FakeTrainer:
    """What PeriodicCheckpoint asks of a Trainer: the step, where it is, and a save that writes the step."""

    def __init__(self):
        self.global_step, self.is_global_zero, self.world_size, self.training = 0, True, 1, True
        self.state = SimpleNamespace(fn="fit")
        self.strategy = SimpleNamespace(barrier=lambda name: None)
        self.saves: list[int] = []
        self.logger_saves: list[int] = []  # the steps the loggers were saved at (their rows written to disk)
        self.order: list[str] = []  # the module's rows written, the loggers saved, the checkpoint: in the order done
        self.loggers = [SimpleNamespace(save=lambda: (self.logger_saves.append(self.global_step),
                                                      self.order.append("loggers")))]
        self.lightning_module = SimpleNamespace(flush_rows=lambda: self.order.append("rows"))
        self.lr_scheduler_configs, self.optimizers, self.precision_plugin = [], [], SimpleNamespace()

    def save_checkpoint(self, path, weights_only=False):
        self.saves.append(self.global_step)
        self.order.append("checkpoint")
        path.write_text(str(self.global_step))


def drive(callback: PeriodicCheckpoint, trainer: FakeTrainer, steps: int, val_every: int) -> None:
    """Lightning's order of calls over `steps` optimizer steps (validation after the batch end of its step)."""
    module = SimpleNamespace(status="running")
    for step in range(1, steps + 1):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, module, None, None, step - 1)
        if step % val_every == 0:
            callback.on_validation_end(trainer, module)
    callback.on_train_end(trainer, module)


def test_every_n_steps_after_the_validation_of_that_step_and_at_the_end(tmp_path):
    path = tmp_path / "last.ckpt"
    trainer = FakeTrainer()
    drive(PeriodicCheckpoint(path, every=4, val_every=6), trainer, steps=14, val_every=6)
    assert trainer.saves == [4, 8, 12, 14]  # 12 is saved once, after its validation
    assert trainer.logger_saves == trainer.saves  # metrics.csv holds every row up to each checkpoint
    # ... the rows the module still held (deferred, or this batch's) included: written before the loggers are saved
    assert trainer.order == ["rows", "loggers", "checkpoint"] * len(trainer.saves)
    assert path.read_text() == "14" and sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_validation_outside_fit_writes_nothing(tmp_path):
    trainer = FakeTrainer()
    trainer.state.fn, trainer.global_step = "validate", 4
    PeriodicCheckpoint(tmp_path / "last.ckpt", every=4, val_every=4).on_validation_end(trainer, None)
    assert trainer.saves == []


def test_a_diverged_run_is_not_saved_at_the_end(tmp_path):
    trainer = FakeTrainer()
    trainer.global_step = 3
    PeriodicCheckpoint(tmp_path / "last.ckpt", every=10, val_every=10).on_train_end(trainer, SimpleNamespace(
        status="diverged"))
    assert trainer.saves == []


@pytest.mark.parametrize(("exception", "world_size", "saved"), [
    (KeyboardInterrupt(), 1, [7]), (RuntimeError("x"), 1, []), (KeyboardInterrupt(), 2, [])])
def test_ctrl_c_saves_a_single_process_run(tmp_path, exception, world_size, saved):
    trainer = FakeTrainer()
    trainer.global_step, trainer.world_size = 7, world_size
    PeriodicCheckpoint(tmp_path / "last.ckpt", every=10, val_every=10).on_exception(trainer, None, exception)
    assert trainer.saves == saved


@pytest.mark.parametrize(("scheduled", "updated", "saved"), [
    (7, 7, [7]),  # between two steps
    (6, 7, []),  # Ctrl-C after step 7's update, before its schedule step: the previous checkpoint stays
    (6, 6, []),  # ... or before the step was counted
])
def test_ctrl_c_inside_a_step_keeps_the_previous_checkpoint(tmp_path, scheduled, updated, saved):
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.AdamW([weight])
    for _ in range(updated):
        weight.grad = torch.ones(1)
        optimizer.step()
    trainer = FakeTrainer()
    trainer.global_step, trainer.optimizers = 7, [optimizer]
    trainer.lr_scheduler_configs = [SimpleNamespace(scheduler=SimpleNamespace(last_epoch=scheduled))]
    PeriodicCheckpoint(tmp_path / "last.ckpt", every=10, val_every=10).on_exception(trainer, None, KeyboardInterrupt())
    assert trainer.saves == saved


@pytest.mark.parametrize(("rank", "training", "saved"), [(0, True, [7]), (1, True, [7]), (0, False, [])])
def test_sigterm_saves_on_every_rank_at_the_step_it_stopped(tmp_path, rank, training, saved):
    # Lightning stops every rank at the same step boundary on SIGTERM (a scheduler's pre-emption or time limit)
    # and raises SIGTERMException there; the checkpoint of that step is saved by all ranks together. Stopped
    # inside a validation (training False) the previous checkpoint stays: a half-done validation is not a state.
    trainer = FakeTrainer()
    trainer.global_step, trainer.world_size, trainer.is_global_zero, trainer.training = 7, 2, rank == 0, training
    PeriodicCheckpoint(tmp_path / "last.ckpt", every=10, val_every=10).on_exception(trainer, None, SIGTERMException())
    assert trainer.saves == saved


def _stub_signals(monkeypatch) -> tuple[list, dict]:
    """signal.getsignal/signal over a table that starts with submitit's USR2 handler and Lightning's SIGTERM one, each
    recording its calls: (the calls, the table)."""
    import signal

    monkeypatch.delenv(PREEMPT_SIGNAL_ENV, raising=False)
    calls: list = []
    installed = {signal.SIGUSR2: lambda signum, frame: calls.append(("submitit", signum)),
                 signal.SIGTERM: lambda signum, frame: calls.append(("lightning", signum))}
    monkeypatch.setattr(signal, "getsignal", lambda signum: installed[signum])
    monkeypatch.setattr(signal, "signal", lambda signum, handler: installed.__setitem__(signum, handler))
    return calls, installed


def test_a_signal_only_flags_the_stop_every_rank_raises_at_the_next_batch_and_submitit_gets_its_signal(monkeypatch):
    # submitit sends USR2 before a job's time limit or on pre-emption, and its handler requeues the job and exits at
    # once, wherever training is. During fit both it and SIGTERM only set a flag (no collective, no exception in a
    # handler); the next batch start raises SIGTERMException on every rank (PeriodicCheckpoint saves), and
    # submitit's handler gets its signal once the run is recorded.
    import signal

    calls, installed = _stub_signals(monkeypatch)
    previous, lightning_sigterm = installed[signal.SIGUSR2], installed[signal.SIGTERM]
    callback = PreemptionSignal()
    callback.forward()
    assert calls == []  # nothing received: nothing to hand on
    callback.on_train_start(None, None)
    callback.on_train_batch_start(None, None, None, 0)  # no signal: training goes on
    installed[signal.SIGUSR2](signal.SIGUSR2, None)
    assert calls == [] and callback.flagged  # Lightning's handler replaced: nothing ran inside the handler
    with pytest.raises(SIGTERMException):
        callback.on_train_batch_start(None, None, None, 1)
    callback.on_exception(None, None, SIGTERMException())
    assert installed[signal.SIGUSR2] is previous and installed[signal.SIGTERM] is lightning_sigterm  # restored
    callback.forward()
    assert calls == [("submitit", signal.SIGUSR2)]


def test_the_fit_loses_lightning_s_per_batch_sigterm_broadcast_and_a_signal_from_before_is_taken_over(monkeypatch):
    """Lightning broadcasts rank 0's SIGTERM flag at every batch's start under DDP and reads it (a host sync each
    batch); the agreement replaces it. A SIGTERM that Lightning's handler caught before the fit's start is not lost:
    the agreement takes it over, and Lightning's own flag (which would stop that rank alone) is cleared."""
    import signal

    import lightning as L

    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)  # the process's handlers stay as they are
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    loop = trainer.fit_loop.epoch_loop
    assert hasattr(loop, "_broadcast_sigterm_tensor")  # in every Lightning the project allows
    broadcasts = []
    monkeypatch.setattr(type(loop), "_broadcast_sigterm_tensor", lambda self: broadcasts.append(1))
    trainer._signal_connector.received_sigterm = True
    callback = PreemptionSignal()
    callback.on_train_start(trainer, None)
    loop._broadcast_sigterm_tensor()
    assert broadcasts == [] and not trainer.received_sigterm and callback.flagged
    with pytest.raises(SIGTERMException):
        callback.on_train_batch_start(trainer, None, None, 0)


def test_the_step_0_and_final_validations_get_the_flag_only_handler_too_and_a_fits_own_validation_keeps_it(
        monkeypatch):
    """trainer.validate runs outside fit, under Lightning's handlers (2.6 broadcasts inside the SIGTERM handler): the
    flag-only handler covers it, and is restored after it; the validation inside a fit leaves the fit's in place."""
    import signal

    calls, installed = _stub_signals(monkeypatch)
    lightning_sigterm = installed[signal.SIGTERM]
    validate = SimpleNamespace(state=SimpleNamespace(fn="validate"))
    fitting = SimpleNamespace(state=SimpleNamespace(fn="fit"))
    callback = PreemptionSignal()
    callback.on_validation_start(validate, None)  # the step-0 validation
    installed[signal.SIGTERM](signal.SIGTERM, None)
    assert calls == [] and callback.flagged  # only the flag: no collective, no exception inside the handler
    callback.on_validation_end(validate, None)
    assert installed[signal.SIGTERM] is lightning_sigterm  # restored for the fit, which installs its own
    callback.on_train_start(fitting, None)
    ours = installed[signal.SIGTERM]
    callback.on_validation_start(fitting, None)  # the fit's own validation every val_every steps
    callback.on_validation_end(fitting, None)
    assert installed[signal.SIGTERM] is ours
    with pytest.raises(SIGTERMException):  # the stop asked for at step 0 is taken at the fit's first batch
        callback.on_train_batch_start(None, None, None, 0)


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    path.write_text("old")
    trainer = FakeTrainer()

    def half_written(p, weights_only=False):
        p.write_text("half")
        raise OSError("disk full")

    trainer.save_checkpoint = half_written
    with pytest.raises(OSError, match="disk full"):
        PeriodicCheckpoint(path, every=1, val_every=10).save(trainer)
    assert path.read_text() == "old"


def test_step_times_only_with_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(STEP_TIMES_ENV, raising=False)
    assert StepTimes.from_env() is None
    log = tmp_path / "times.jsonl"
    monkeypatch.setenv(STEP_TIMES_ENV, str(log))
    times = StepTimes.from_env()
    times.mark("train_start")
    weight = torch.nn.Parameter(torch.ones(1))
    trainer = SimpleNamespace(optimizers=[torch.optim.SGD([weight], lr=0.1)])
    events = lambda: [json.loads(line)["event"] for line in log.read_text().splitlines()]
    for batch in range(3):  # batches of two optimizer steps each
        times.on_train_batch_start(trainer, None, None, 0)
        if batch == 0:
            assert events() == ["train_start", "first_step_start"]  # the first step has not ended yet
        for _ in range(2):
            weight.grad = torch.ones(1)
            trainer.optimizers[0].step()
        times.on_train_batch_end(trainer, None, None, None, 0)
    assert events() == ["train_start", "first_step_start", "first_step_end"]  # each once, the end after a step
    monkeypatch.setenv("RANK", "1")
    assert StepTimes.from_env() is None  # rank 0 alone writes


def test_the_progress_bar_redraws_every_n_steps_and_at_the_last(monkeypatch):
    from lightning.pytorch.callbacks import RichProgressBar

    drawn: list[int] = []  # the position the bar is drawn at (Lightning's batch_idx + 1)
    monkeypatch.setattr(RichProgressBar, "on_train_batch_end", lambda self, trainer, module, outputs, batch,
                        batch_idx: drawn.append(batch_idx + 1))
    bar, trainer = StepProgressBar(every=4), SimpleNamespace(global_step=0, max_steps=11)
    for batch_idx, step in enumerate((2, 4, 6, 8, 10, 11)):  # batches of two optimizer steps, the last cut short
        trainer.global_step = step
        bar.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert drawn == [4, 8, 11]  # at the steps, not the batches
    bar._trainer = SimpleNamespace(max_steps=11, global_step=6)  # a run resumed at step 6 still counts to 11
    assert bar.total_train_batches == 11


def test_the_progress_bar_shows_the_last_logged_loss_and_not_the_loggers_version(monkeypatch):
    from lightning.pytorch.callbacks import RichProgressBar

    monkeypatch.setattr(RichProgressBar, "get_metrics", lambda self, trainer, module: {"v_num": "5d61", "lr": 1.0})
    bar = StepProgressBar(every=10)
    assert bar.get_metrics(None, SimpleNamespace(last_train_loss=None)) == {"lr": 1.0}
    assert bar.get_metrics(None, SimpleNamespace(last_train_loss=2.5)) == {"lr": 1.0, "train/loss": 2.5}


def test_the_progress_bar_says_steps_not_epochs():
    """A run is max_steps long (max_epochs=-1): Lightning's description read "Epoch 0/-2"."""
    bar = StepProgressBar(every=10)
    bar._trainer = SimpleNamespace(max_epochs=-1, max_steps=40)
    description = bar._get_train_description(0)
    assert description.strip() == "Step"
    assert len(description) == len(bar.validation_description)  # no flicker between the two bars


def test_the_profiler_hands_back_one_shared_null_context():
    profiler = NoProfiler()
    first, second = profiler.profile("[Callback]A.on_train_batch_end"), profiler.profile("[LightningModule]B.x")
    assert first is second
    with first, second:  # nested, as hooks nest
        pass
