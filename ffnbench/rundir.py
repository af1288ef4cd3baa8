"""A run's directory: where it is, what a (re)start does with it, and clearing up after a refused start.

One directory per run, named for what the run computes (config.run_name), so a rerun finds it again. What
train() does there is decided here, ahead of any work, and `make sweep`'s dry run makes the same decision:
skip a finished run, resume an interrupted one from checkpoints/last.ckpt, start a fresh one, and refuse a
directory that holds a different config. This module does not import Lightning (the sweep planner imports it),
and reads a checkpoint with torch only when there is one."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ffnbench.config import identity_diff
from ffnbench.errors import ConfigError, RunDirError
from ffnbench.records import RUN_CONFIG_FILE, CorruptRecord, read_json
from ffnbench.result import FINAL_STATUSES, RunResult

CKPT_DIR = "checkpoints"
LAST_CKPT = "last.ckpt"
HYDRA_FILES = {".hydra": {"config.yaml", "hydra.yaml", "overrides.yaml"}}  # what Hydra writes before a job


def resolve_run_dir(cfg: DictConfig) -> Path:
    """`run_dir` when set, else the directory Hydra made for this job."""
    if cfg.get("run_dir"):
        return Path(cfg.run_dir).expanduser().resolve()
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    raise ConfigError("run_dir: not set; pass run_dir=<dir> when calling train() outside the Hydra entry point")


def last_checkpoint(run_dir: Path) -> Path:
    return Path(run_dir) / CKPT_DIR / LAST_CKPT


@dataclass(frozen=True)
class RunPlan:
    action: str  # "skip" | "resume" | "fresh"
    ckpt: Path | None = None
    resumed_from: int | None = None  # the checkpoint's step, when resuming
    previous: RunResult | None = None  # the result.json found there, if any (the finished one, when skipping)


def plan_run(run_dir: Path, config: dict) -> RunPlan:
    """Decide what to do with a run directory: skip a finished run, resume an interrupted one, start fresh.
    A directory that holds a different config is refused (RunDirError), never silently reused.

    Args:
        run_dir: the run's directory (it need not exist).
        config: the run's resolved config; compared with the directory's run_config.json and checkpoint,
            ignoring the keys that do not change what a run computes (config.NON_IDENTITY_KEYS).
    """
    _check_saved_config(run_dir, config)
    try:
        previous = RunResult.read(run_dir)
    except CorruptRecord as e:
        print(f"ffnbench: warning: {e}; the run will be resumed or redone", file=sys.stderr)
        previous = None
    if previous is not None and previous.status in FINAL_STATUSES:
        return RunPlan("skip", previous=previous)
    ckpt = last_checkpoint(run_dir)
    if ckpt.exists():
        fingerprint, step = _read_checkpoint(ckpt)
        diff = identity_diff(fingerprint, config)
        if diff:
            raise RunDirError(f"{ckpt} was written by a different config ({', '.join(diff)}); not resuming it")
        return RunPlan("resume", ckpt=ckpt, resumed_from=step, previous=previous)
    return RunPlan("fresh", previous=previous)


def _check_saved_config(run_dir: Path, config: dict) -> None:
    path = run_dir / RUN_CONFIG_FILE
    if not path.exists():
        return
    try:
        saved = read_json(path)
    except CorruptRecord as e:
        raise RunDirError(f"{e}; delete {path} if the run directory is otherwise yours") from None
    diff = identity_diff(saved, config)
    if diff:
        shown = "; ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in list(diff.items())[:6])
        raise RunDirError(
            f"{run_dir} holds a run with a different config ({shown}{' ...' if len(diff) > 6 else ''}). "
            "It is not reused: pick another directory (run_dir=..., name=... or runs_root=...) or delete it."
        )


def _read_checkpoint(ckpt: Path) -> tuple[dict, int]:
    """The config fingerprint a checkpoint was written with, and its step."""
    import torch

    try:
        saved = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)
    except Exception as e:
        raise RunDirError(
            f"{ckpt} cannot be read ({type(e).__name__}: {e}); delete it to start this run over"
        ) from None
    return saved.get("ffnbench", {}).get("fingerprint", {}), int(saved["global_step"])


def holds_only_hydra_files(run_dir: Path, log_files: set[str]) -> bool:
    """Whether `run_dir` holds nothing but what Hydra writes before a job starts (.hydra/ with its three
    files, and the job's log files `log_files`), so that removing it loses no run's work."""
    for entry in run_dir.iterdir():
        if entry.name in HYDRA_FILES and entry.is_dir() and not entry.is_symlink():
            if not {p.name for p in entry.iterdir()} <= HYDRA_FILES[entry.name]:
                return False
        elif not (entry.name in log_files and entry.is_file()):
            return False
    return True


def remove_failed_start(run_dir: Path, log_files: set[str], stop_at: Path | None = None) -> bool:
    """After a start refused for a user error: remove `run_dir` if it holds only what Hydra wrote for this
    start (never a directory with a result, a checkpoint or a run_config.json), then the parents that are
    left empty, up to `stop_at` (excluded). Returns whether the run directory was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not holds_only_hydra_files(run_dir, log_files):
        return False
    shutil.rmtree(run_dir)
    if stop_at is not None:
        stop_at = Path(stop_at).resolve()
        parent = run_dir.resolve().parent
        while parent != stop_at and stop_at in parent.parents and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return True
