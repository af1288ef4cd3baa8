"""Loggers: metrics.csv in the run directory (resumable), Weights & Biases (online only when logged in and the
W&B host answers), and the Lightning log lines and warnings a run leaves out."""

from __future__ import annotations

import csv
import functools
import json
import logging
import netrc
import os
import secrets
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from ffnbench.data.tokenizer import unreachable
from ffnbench.errors import ConfigError
from ffnbench.fileio import CorruptRecord, read_json, write_json_atomic

if TYPE_CHECKING:
    from ffnbench.model.ffn import FFNSpec

WANDB_MODES = ("online", "offline", "disabled", "auto")


class _QuietLightning(logging.Filter):
    """Drop Lightning's advertising, a deprecation notice from its own internals and its accelerator banner
    ("GPU available: ..., TPU available: ..." on every run: the run's own first line says the device it trains on
    and why); keep everything else."""

    # "Detected KeyboardInterrupt, attempting graceful shutdown": train() says where the run stopped and how to resume;
    # "`Trainer(val_check_interval=1)` was configured so validation will run after every batch": a run validates every
    # trainer.val_every steps, and a batch holds trainer.inner_steps of them, so Lightning's count of batches misleads
    NOISE = ("litlogger", "LitLogger", "isinstance(treespec, LeafSpec)", "Detected KeyboardInterrupt",
             "so validation will run after every batch")
    BANNER = ("GPU available:", "TPU available:", "HPU available:", "IPU available:")  # rank_zero_info's, at start

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (any(n in message for n in self.NOISE) or message.startswith(self.BANNER))


@functools.cache  # once per process
def quiet_lightning() -> None:
    """Leave out of a run's output what says nothing about the run."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_QuietLightning())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # Every metric the module logs through self.log is a validation record's (LMModule._log_validation: its step and
    # tokens, val/*, ffn/*), all-reduced by the module itself before it is logged on rank 0, so Lightning's advice to
    # sync them, printed once per metric under DDP, does not apply.
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(val/|ffn/|step'|tokens')")


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
    own rows (numbers, the epoch added), without going through `LightningModule.log`: that costs a deep copy of the
    metric's state per call, hundreds of microseconds, and keeps the values in a collection that Lightning then walks
    after every step, logged or not. The values are numbers already (the module reads them: training.readout). Unlike
    Lightning's connector it does not save the loggers after each row (metrics.csv would be appended to every logging
    step): the CSV logger writes its rows by itself at a row whose step + 1 is a multiple of 100, and every checkpoint
    (callbacks.PeriodicCheckpoint) and the run's end save them all, so a resumed run's file holds every row up to its
    checkpoint.

    Args:
        trainer: the Lightning Trainer; its loggers and current epoch.
        metrics: name → number.
        step: the optimizer step the row belongs to (metrics.csv's `step`, wandb's trainer/global_step).
    """
    row = dict(metrics)
    row.setdefault("epoch", trainer.current_epoch)
    for logger in trainer.loggers:
        logger.log_metrics(row, step=step)


def make_loggers(lcfg: Mapping, run_dir: Path, config: dict, spec: FFNSpec, resumed_from: int | None,
                 rank_zero: bool) -> list:
    """The loggers `cfg.logger` asks for: metrics.csv (kept up to `resumed_from` on a resume) and, on rank 0,
    W&B (run id from the run directory, grouped by experiment name, tagged with the FFN)."""
    loggers: list = []
    if lcfg.get("csv"):
        loggers.append(RunCSVLogger(run_dir, resume_step=resumed_from))
    if lcfg.get("wandb") and rank_zero:
        loggers.append(make_wandb_logger(dict(lcfg["wandb"]), run_dir, str(config["name"]), run_dir.name,
                                         wandb_tags(config, spec), config, resumed_from))
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


def wandb_host() -> tuple[str, int]:
    """The W&B server's host and port: WANDB_BASE_URL (a server of one's own) or api.wandb.ai."""
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    return url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)


def wandb_mode(requested: str | None) -> str:
    """`logger.wandb.mode` checked (a ConfigError names a bad one): online | offline | disabled | auto."""
    requested = (requested or "auto").lower()
    if requested not in WANDB_MODES:
        raise ConfigError(f"logger.wandb.mode: expected one of {', '.join(WANDB_MODES)}, got {requested!r}")
    return requested


def resolve_wandb_mode(requested: str | None, run_dir: Path | None = None) -> str:
    """The mode a run's wandb starts in. `auto` (the default) is online only with credentials (WANDB_API_KEY or
    ~/.netrc) *and* a route to the W&B host: a compute node often shares the login node's ~/.netrc but has no
    route out, and there wandb.init would sit in its retries until it times out. Else offline, with the
    `wandb sync` line that uploads the run later. Any other mode is as asked."""
    requested = wandb_mode(requested)
    if requested != "auto":
        return requested
    if not has_wandb_credentials():
        return "offline"
    host, port = wandb_host()
    why = unreachable(host, port)
    if why is None:
        return "online"
    where = f"{run_dir}/wandb/offline-run-*" if run_dir else "<run_dir>/wandb/offline-run-*"
    print(f"ffnbench: wandb: {host} is unreachable ({why}); logging offline. Upload later from a machine "
          f"that reaches it: wandb sync {where}", file=sys.stderr)
    return "offline"


WANDB_RUN_FILE = "wandb_run.json"  # in the run directory: {"id": the wandb run id, "logged": {row kind: last step}}
STEP_BY_TOKENS = ("train/*", "val/*", "ffn/*", "perf/*", "lr")  # the metrics W&B plots against `tokens`


def wandb_run_record(run_dir: Path, resumed_from: int | None) -> dict[str, Any]:
    """The run's wandb id and the last step of each kind of row already logged under it. A fresh start gets a
    new id (a re-created run directory must not continue the old directory's wandb run); a resume keeps the
    one saved in the run directory (WANDB_RUN_FILE), so its rows append to the same wandb run."""
    path = Path(run_dir) / WANDB_RUN_FILE
    if resumed_from is not None and path.exists():
        try:
            saved = read_json(path)
        except CorruptRecord:
            saved = {}
        if isinstance(saved.get("id"), str) and isinstance(saved.get("logged"), dict):
            return saved
    record = {"id": secrets.token_hex(8), "logged": {}}
    write_json_atomic(path, record)
    return record


def _row_kind(metrics: Mapping[str, Any]) -> str:
    """train | val | final: the rows logged at one step (module.py: a training row, then the validation after it;
    the final validation repeats the last step)."""
    return "final" if "val/final_loss" in metrics else "val" if "val/loss" in metrics else "train"


def define_wandb_metrics(run: Any) -> None:
    """`tokens` is the x-axis of the training, validation, FFN and throughput metrics: runs of different batch
    sizes or sequence lengths compare on it, and validation rows carry it too (module.py). Named metrics, not
    the catch-all "*": W&B matches globs in no fixed order, so "*" beside "val/*" would make the axis a coin toss."""
    run.define_metric("trainer/global_step")
    run.define_metric("tokens")
    for name in STEP_BY_TOKENS:
        run.define_metric(name, step_metric="tokens", step_sync=True)


class RunWandbLogger(WandbLogger):
    """Lightning's WandbLogger with the run's own x-axis (define_wandb_metrics, instead of Lightning's
    "*" → trainer/global_step) and, on a resume, without the rows the interrupted start already logged: the
    steps between the checkpoint and the interruption are trained again, bit for bit, and would otherwise
    be logged twice.

    The run's record (WANDB_RUN_FILE: the last step of each kind of row sent to wandb) must never say less than wandb
    has, however the process ends, yet rewriting it at every row costs a file close a row (a server round trip on NFS).
    So a row of a step is held here and sent to wandb at the next save(), which then writes the record of what it
    sent: save() comes at every checkpoint (callbacks.PeriodicCheckpoint, after the module wrote its rows up to the
    checkpoint's step), after each row Lightning logs itself (the validations), and at every end Lightning reports
    (finalize: finished, failed, interrupted). A process killed outright loses only rows after its last checkpoint,
    which the resume trains and logs again. W&B shows a run's training rows as each save sends them."""

    def __init__(self, run_dir: Path, record: dict[str, Any], **kwargs: Any):
        super().__init__(id=record["id"], **kwargs)
        # Lightning passes anonymous=None to wandb.init, which wandb (>= 0.19) answers with "The anonymous setting has
        # no effect and will be removed" on every run: a setting nobody gave is not passed.
        if self._wandb_init.get("anonymous") is None:
            self._wandb_init.pop("anonymous", None)
        self._record_path = Path(run_dir) / WANDB_RUN_FILE
        self._record = record
        self._replayed = dict(record["logged"])  # what an earlier start logged, per row kind
        self._held: list[tuple[dict[str, Any], int]] = []  # rows not yet sent (save() sends them)
        self._written = json.dumps(record, sort_keys=True)  # the record as on disk (wandb_run_record wrote it)

    @property
    @rank_zero_experiment
    def experiment(self):
        if self._experiment is None:
            import wandb

            if wandb.run is not None:  # left open by an earlier run of this process: closed, never continued
                wandb.finish()
            self._experiment = wandb.init(**self._wandb_init)
            define_wandb_metrics(self._experiment)
        return self._experiment

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is None:
            super().log_metrics(metrics, step)
            return
        kind = _row_kind(metrics)
        if step <= self._replayed.get(kind, -1):
            return
        self._held.append((dict(metrics), step))

    def save(self) -> None:
        held, self._held = self._held, []
        for metrics, step in held:
            kind = _row_kind(metrics)
            self._record["logged"][kind] = max(step, self._record["logged"].get(kind, -1))
        for metrics, step in held:
            super().log_metrics(metrics, step)
        # then the record (killed between the two, a resume logs those rows again rather than losing them); written
        # only when it changed, and durably: a few times a run
        text = json.dumps(self._record, sort_keys=True)
        if text != self._written:
            write_json_atomic(self._record_path, self._record)
            self._written = text
        super().save()

    def finalize(self, status: str) -> None:
        self.save()
        super().finalize(status)


def make_wandb_logger(wcfg: dict, run_dir: Path, group: str, run_name: str, tags: list[str], config: dict,
                      resumed_from: int | None = None):
    """The run's W&B logger (mode: resolve_wandb_mode; id: wandb_run_record). `resumed_from` is the checkpoint's
    step when the run resumes, None on a fresh start."""
    import wandb

    mode = resolve_wandb_mode(wcfg.get("mode"), run_dir)
    return RunWandbLogger(
        run_dir,
        wandb_run_record(run_dir, resumed_from),
        project=wcfg.get("project") or "ffnbench",
        entity=wcfg.get("entity"),
        group=group,
        name=run_name,
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
    # an offline run (WANDB_MODE=offline, no credentials, or no network) says how to upload it, whatever made it so
    offline, where = bool(getattr(wandb.run, "offline", False)), getattr(wandb.run.settings, "sync_dir", None)
    wandb.finish(exit_code=exit_code)
    if offline and where:
        print(f"ffnbench: wandb: logged offline; upload it with `wandb sync {where}`", file=sys.stderr)
