"""Train one model: `python -m ffnbench.train [overrides]` (Hydra; `-m` for a sweep), or `train(cfg)`.

compose → check every setting (runcheck) → lock the run directory (rundir.RunLock: a run another process trains now
is skipped) → plan it (rundir: skip finished, resume interrupted, refuse a different config) → data → fit.fit_run
(model, validate at step 0, fit, final validation) → result.json (RunResult, atomic), next to run_config.json,
metrics.csv, checkpoints/last.ckpt and Hydra's .hydra/."""

from __future__ import annotations

import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

import hydra
import lightning as L
from omegaconf import DictConfig, OmegaConf

from ffnbench.cli import user_errors_exit
from ffnbench.config.compose import CONF_DIR, MULTIRUN_FLAGS, check_overrides
from ffnbench.ddp import ddp_scope, global_rank
from ffnbench.errors import FFNBenchError
from ffnbench.fileio import DiskFull, free_bytes, full_folder, no_space, size_text, write_json_atomic
from ffnbench.fit import fit_run
from ffnbench.placement import claim_devices, share_cpu_threads
from ffnbench.runcheck import check_run
from ffnbench.runs.result import RESULT_FILE, RunResult
from ffnbench.runs.rundir import (
    RUN_CONFIG_FILE,
    RunLock,
    check_writable,
    plan_run,
    rank_zero_holds,
    remove_failed_start,
)
from ffnbench.sweep.progress import progress_line
from ffnbench.training.callbacks import StepTimes
from ffnbench.training.loggers import quiet_lightning

quiet_lightning()


def train(cfg: DictConfig, callbacks: list[L.Callback] | None = None) -> RunResult:
    """Train one model as `cfg` says; return its record (also written to <run_dir>/result.json). A finished run
    in the same directory is not trained again: its record is returned. A run that another process is training
    now (it holds the directory's lock) is not started twice: a record with status "running" is returned."""
    started = time.time()
    step_times = StepTimes.from_env()
    if step_times:
        step_times.mark("train_start")
    run = check_run(cfg)
    lock = RunLock(run.run_dir) if global_rank() == 0 else None  # DDP ranks > 0 train under rank 0's lock
    holder = lock.acquire() if lock else rank_zero_holds(run.run_dir)
    if holder is not None:
        print(f"ffnbench: {run.run_dir.name}: already running {holder}; skipped ({run.run_dir})")
        return RunResult(status="running", name=run.config.get("name"), run_name=run.run_dir.name,
                         run_dir=str(run.run_dir), seed=run.seed, config=run.config)
    try:
        plan = plan_run(run.run_dir, run.config)
        if plan.action == "skip":
            print(f"ffnbench: {run.run_dir.name}: already {plan.previous.status}, skipped "
                  f"({run.run_dir / RESULT_FILE})")
            return plan.previous
        progress = progress_line()
        if progress:
            print(f"ffnbench: {progress}", flush=True)
        share_cpu_threads(run.device_setup)
        L.seed_everything(run.seed, workers=True, verbose=False)
        run.data.prepare_data()
        run.data.setup("fit")  # a corpus too small for the settings fails here, before the run directory is written
        if step_times:
            step_times.mark("data_ready")
        if global_rank() == 0:
            write_json_atomic(run.run_dir / RUN_CONFIG_FILE, run.config)
        with claim_devices(run.device_setup) as devices, ddp_scope():
            return fit_run(run, plan, devices, started, [*([step_times] if step_times else []), *(callbacks or [])])
    finally:
        if lock:
            lock.release()


def sample_line(run_dir: Path) -> str:
    """The last line of a finished `ffnbench train`: the run's folder, as the command that samples from it."""
    try:
        shown = Path(run_dir).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = Path(run_dir)
    return f"ffnbench: sample from it: ffnbench sample {shlex.quote(str(shown))}"


# ---- the command line ----------------------------------------------------------------------------------------


# an absolute config path: `ffnbench train` imports this module, where Hydra would resolve "../conf" in the package
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def _hydra_main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        result = train(cfg)
        if not multirun and result.status == "finished" and result.run_dir:
            print(sample_line(Path(result.run_dir)))
        return result.status
    except DiskFull as e:  # recorded in result.json (failed); one line, exit 1 (a sweep goes on: its summary counts it)
        print(f"ffnbench: {e}", file=sys.stderr)
        if multirun:
            return "failed"
        sys.exit(1)
    except FFNBenchError as e:
        print(f"ffnbench: error: {e}", file=sys.stderr)
        # Hydra made the run directory before train() could refuse the run: do not leave it behind.
        remove_failed_start(Path(hc.runtime.output_dir), {f"{hc.job.name}.log"}, stop_at=Path(str(cfg.runs_root)))
        if multirun:
            return "failed"  # one bad run does not stop the sweep; the sweep summary counts it
        sys.exit(2)
    except Exception as e:
        if (full := no_space(e)) is not None:  # a write outside the training (run_config.json): one line too
            folder = full_folder(full, Path(hc.runtime.output_dir))
            print(f"ffnbench: disk full: {folder} has {size_text(free_bytes(folder))} free; free space there, then "
                  "rerun the same command", file=sys.stderr)
            if multirun:
                return "failed"
            sys.exit(1)
        if multirun:  # result.json already says failed, with the error; the other runs go on
            traceback.print_exc()
            return "failed"
        raise


def check_output_dirs(configs: list[DictConfig], args: list[str]) -> None:
    """The folders Hydra makes before a job starts (hydra.run.dir, or hydra.sweep.dir with -m) and run_dir when
    set: each one that cannot be made or written is a ConfigError naming the setting that chose it (runs_root unless
    the command line set the folder itself), before Hydra fails there with a traceback."""
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    hydra_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = {a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a}
    seen: set[tuple[str, str]] = set()
    for cfg in configs:
        folders = [(hydra_key if hydra_key in given else "runs_root", str(OmegaConf.select(cfg, hydra_key)))]
        if cfg.get("run_dir"):
            folders.append(("run_dir", str(cfg.run_dir)))
        for setting, folder in folders:
            if (setting, folder) not in seen:
                seen.add((setting, folder))
                # run_dir is expanded as the run expands it (rundir); Hydra's own folders are used as written
                path = Path(folder).expanduser() if setting == "run_dir" else Path(folder)
                check_writable(path, setting if setting != "runs_root" else f"runs_root={cfg.runs_root}")


def main() -> None:
    """`python -m ffnbench.train [-m] [overrides]`. The overrides are composed once before Hydra starts, so that
    any that cannot be (an unknown option of a config group, a key that does not exist, an output folder that cannot
    be written) is one line and exit 2."""
    args = sys.argv[1:]
    configs = user_errors_exit(check_overrides)(args)
    user_errors_exit(check_output_dirs)(configs, args)
    try:
        _hydra_main()
    except KeyboardInterrupt:  # Ctrl-C before the training started (a run stopped in training says so itself)
        print("ffnbench: stopped by Ctrl-C before training started", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)


if __name__ == "__main__":
    main()
