"""Loggers: metrics.csv in the run directory (resumable), Weights & Biases (offline unless logged in), and
the Lightning log lines and warnings a run leaves out."""

from __future__ import annotations

import csv
import functools
import hashlib
import logging
import netrc
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from ffnbench.errors import ConfigError

if TYPE_CHECKING:
    from ffnbench.ffn import FFNSpec

WANDB_MODES = ("online", "offline", "disabled", "auto")


class _QuietLightning(logging.Filter):
    """Drop Lightning's advertising and a deprecation notice from its own internals; keep everything else."""

    NOISE = ("litlogger", "LitLogger", "isinstance(treespec, LeafSpec)")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in record.getMessage() for n in self.NOISE)


@functools.cache  # once per process
def quiet_lightning() -> None:
    """Leave out of a run's output what says nothing about the run."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_QuietLightning())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # A diverged run's training_step returns None on purpose (module.py): that skips the step.
    warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
    # Validation metrics are all-reduced by the module itself (module.py), so Lightning's advice does not apply.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(val|ffn)/")


class _RunCSVWriter(ExperimentWriter):
    """Lightning's CSV writer, except that it does not delete metrics.csv when the directory has other files,
    and on a resume keeps the rows up to the checkpoint's step (later rows will be logged again)."""

    def __init__(self, log_dir: str, resume_step: int | None):  # super().__init__ would delete the file
        from lightning.fabric.utilities.cloud_io import get_filesystem

        self.hparams: dict[str, Any] = {}
        self.metrics: list[dict[str, float]] = []
        self.metrics_keys: list[str] = []
        self._fs = get_filesystem(log_dir)
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        os.makedirs(log_dir, exist_ok=True)
        path = Path(self.metrics_file_path)
        if resume_step is None or not path.exists():
            path.unlink(missing_ok=True)
            return
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and float(r["step"]) <= resume_step]
        self.metrics_keys = sorted(header)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(rows)


class RunCSVLogger(CSVLogger):
    """Writes <run_dir>/metrics.csv and <run_dir>/hparams.yaml."""

    def __init__(self, run_dir: Path, resume_step: int | None = None):
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> _RunCSVWriter:
        if self._experiment is None:
            self._experiment = _RunCSVWriter(self.log_dir, self._resume_step)
        return self._experiment


def log_row(trainer, metrics: Mapping[str, Any], step: int) -> None:
    """One row of training metrics to every logger of the run, at `step`, as Lightning's logger connector writes its
    own rows (numbers, the epoch added, each logger saved), without going through `LightningModule.log`: that costs
    a deep copy of the metric's state per call, hundreds of microseconds, and keeps the values in a collection that
    Lightning then walks after every step, logged or not. Tensors become numbers here: on a GPU, the logging step's
    host sync.

    Args:
        trainer: the Lightning Trainer; its loggers and current epoch.
        metrics: name → number or 0-d tensor.
        step: the optimizer step the row belongs to (metrics.csv's `step`, wandb's trainer/global_step).
    """
    row = {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in metrics.items()}
    row.setdefault("epoch", trainer.current_epoch)
    for logger in trainer.loggers:
        logger.log_metrics(row, step=step)
        logger.save()


def make_loggers(lcfg: Mapping, run_dir: Path, config: dict, spec: FFNSpec, resumed_from: int | None,
                 rank_zero: bool) -> list:
    """The loggers `cfg.logger` asks for: metrics.csv (kept up to `resumed_from` on a resume) and, on rank 0,
    W&B (run id from the run directory, grouped by experiment name, tagged with the FFN)."""
    loggers: list = []
    if lcfg.get("csv"):
        loggers.append(RunCSVLogger(run_dir, resume_step=resumed_from))
    if lcfg.get("wandb") and rank_zero:
        loggers.append(make_wandb_logger(dict(lcfg["wandb"]), run_dir, str(config["name"]), run_dir.name,
                                         wandb_tags(config, spec), config))
    return loggers


def wandb_tags(config: dict, spec: FFNSpec) -> list[str]:
    """The tags that make a run findable in W&B: activation, sizing, bias, model size and seed."""
    return [
        f"act:{spec.act}",
        f"{spec.sizing}:{spec.ratio:g}",
        f"bias:{'on' if spec.bias else 'off'}",
        f"size:{config['model'].get('name', 'custom')}",
        f"seed:{config['seed']}",
    ]


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        hosts = netrc.netrc().hosts
    except (OSError, netrc.NetrcParseError):
        return False
    return any("wandb" in host for host in hosts)


def wandb_mode(requested: str | None) -> str:
    """`auto` (the default) is online when credentials exist, offline otherwise; anything else is as asked."""
    requested = (requested or "auto").lower()
    if requested not in WANDB_MODES:
        raise ConfigError(f"logger.wandb.mode: expected one of {', '.join(WANDB_MODES)}, got {requested!r}")
    if requested == "auto":
        return "online" if has_wandb_credentials() else "offline"
    return requested


def wandb_run_id(run_dir: Path) -> str:
    """Stable per run directory, so a resumed run continues the same wandb run."""
    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def make_wandb_logger(wcfg: dict, run_dir: Path, group: str, run_name: str, tags: list[str], config: dict):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    mode = wandb_mode(wcfg.get("mode"))
    return WandbLogger(
        project=wcfg.get("project") or "ffnbench",
        entity=wcfg.get("entity"),
        group=group,
        name=run_name,
        id=wandb_run_id(run_dir),
        resume="allow",
        mode=mode,
        save_dir=str(run_dir),
        tags=[*tags, *list(wcfg.get("tags") or [])],
        config=config,
        job_type="train",
        settings=wandb.Settings(quiet=True),  # one line per run, not a summary table per run in a sweep log
    )


def finish_wandb(exit_code: int, summary: dict[str, Any] | None = None) -> None:
    """Close this process's wandb run, if one was started, whatever happened to the training."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    if summary:
        wandb.run.summary.update({k: v for k, v in summary.items() if v is not None})
    wandb.finish(exit_code=exit_code)
