"""A training job as Hydra's submitit launcher submits one: a callable that trains one config, and `checkpoint`,
which submitit calls on its pre-emption signal to resubmit the job as it is. Importable by the job's process
(tests/ on its PYTHONPATH), as submitit pickles the job by reference."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import lightning as L


class SignalAt(L.Callback):
    """Send this process `signum` after optimizer step `step`, once (a marker file remembers it across requeues)."""

    def __init__(self, step: int, signum: int, marker: Path):
        self.step, self.signum, self.marker = step, signum, marker

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), self.signum)


class TrainJob:
    def __init__(self, overrides: list[str], run_dir: Path, signal_at: int):
        self.overrides, self.run_dir, self.signal_at = overrides, Path(run_dir), signal_at

    def __call__(self) -> dict:
        from ffnbench.config.compose import compose
        from ffnbench.train import train

        marker = self.run_dir.parent / f"{self.run_dir.name}.signalled"
        signal_at = SignalAt(self.signal_at, signal.SIGUSR2, marker)
        return train(compose([*self.overrides, f"run_dir={self.run_dir}"]), callbacks=[signal_at]).to_json()

    def checkpoint(self):
        import submitit

        return submitit.helpers.DelayedSubmission(self)
