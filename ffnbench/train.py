"""Train one model: `python -m ffnbench.train [overrides]` (Hydra; `-m` for a sweep), or `train(cfg)`.

compose → check every setting → lock the run directory (rundir.RunLock: a run another process trains now is
skipped) → plan it (rundir: skip finished, resume interrupted, refuse a different config) → data → model →
validate at step 0 → fit → final validation → result.json (RunResult, atomic), next to run_config.json,
metrics.csv, checkpoints/last.ckpt and Hydra's .hydra/."""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path

import hydra
import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from ffnbench.cli import user_errors_exit
from ffnbench.config.compose import CONF_DIR, MULTIRUN_FLAGS, check_overrides
from ffnbench.ddp import cluster_environment, ddp_scope, global_rank, patch_ddp_child_command
from ffnbench.errors import FFNBenchError
from ffnbench.fileio import DiskFull, free_bytes, full_folder, no_space, size_text, write_json_atomic
from ffnbench.model.accounting import count_flops, count_params
from ffnbench.model.ffn import size_ffn
from ffnbench.model.model import ModelConfig
from ffnbench.placement import claim_devices, share_cpu_threads
from ffnbench.runcheck import Run, check_run
from ffnbench.runs.result import RESULT_FILE, RunResult
from ffnbench.runs.rundir import (
    RUN_CONFIG_FILE,
    RunLock,
    RunPlan,
    check_writable,
    last_checkpoint,
    plan_run,
    rank_zero_holds,
    remove_failed_start,
)
from ffnbench.sweep.progress import progress_line
from ffnbench.training.callbacks import (
    NoProfiler,
    PeriodicCheckpoint,
    PreemptionSignal,
    StepProgressBar,
    StepTimes,
    WorldSizeCheck,
)
from ffnbench.training.compiling import CompileWatch
from ffnbench.training.loggers import finish_wandb, make_loggers, quiet_lightning
from ffnbench.training.module import LMModule
from ffnbench.training.throughput import ThroughputMonitor, peak_flops

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
            return _fit(run, plan, devices, started, [*([step_times] if step_times else []), *(callbacks or [])])
    finally:
        if lock:
            lock.release()


def _fit(run: Run, plan: RunPlan, devices: int | list[int], started: float, callbacks: list[L.Callback]) -> RunResult:
    """Build the model and the Trainer, train (validating at step 0 on a fresh start and at the last step), and
    record the run, whatever happens to it (a failure, Ctrl-C, divergence)."""
    t, dm, is_rank_zero = run.trainer, run.data, global_rank() == 0
    peak, peak_source = peak_flops(run.device_setup.accelerator, run.device_setup.precision, t.peak_flops,
                                   Path(str(run.config["data"]["cache_dir"])).expanduser())
    compiled = CompileWatch(t.compile)  # before the model is built: a fresh dynamo cache for this run
    module = LMModule(run.model, run.optim, seed=run.seed, total_steps=run.total_steps,
                      tokens_per_step=run.tokens_per_step, val_bytes_per_token=dm.val_bytes_per_token,
                      log_every=t.log_every, compile=t.compile, compile_mode=t.compile_mode, fingerprint=run.config,
                      val_every=t.val_every, loss_chunk=t.loss_chunk)
    # MFU counts causal attention as computed (accounting.count_flops: causal=True); the record's flops block keeps
    # the full-attention convention every earlier record has
    thr = ThroughputMonitor(run.tokens_per_step, count_flops(run.model, causal=True).training, peak,
                            run.device_setup.devices * t.num_nodes,
                            log_every=t.log_every, peak_source=peak_source)
    ckpt_cb = PeriodicCheckpoint(last_checkpoint(run.run_dir), t.ckpt_every, t.val_every)
    ckpt_cb.path.parent.mkdir(parents=True, exist_ok=True)
    loggers = make_loggers(run.config["logger"], run.run_dir, run.config, run.model.ffn, plan.resumed_from,
                           is_rank_zero)
    preemption = PreemptionSignal()
    world = WorldSizeCheck(run.device_setup.devices * t.num_nodes)
    trainer = _trainer(run, devices, loggers, [world, thr, ckpt_cb, preemption, *callbacks])
    if is_rank_zero:
        m = run.model
        final_tokens = int(dm.info["final_val_windows"]) * m.seq_len
        print(f"ffnbench: {run.run_dir.name}: {m.ffn.label}, d_ff={size_ffn(m.ffn, m.d_model).d_ff}, "
              f"{count_params(m).total:,} params, {run.total_steps} steps × {run.tokens_per_step} tokens on "
              f"{run.device_setup.accelerator} ({run.device_setup.precision}); "
              f"peak {peak or 0:.3g} FLOP/s ({peak_source}); "
              f"{final_validation_note(final_tokens, run.total_steps * run.tokens_per_step)}")
        if note := warmup_note(run.optim.warmup_steps, run.total_steps):
            print(f"ffnbench: {run.run_dir.name}: {note}")

    status, error, exit_code = "failed", None, 1
    try:
        if plan.action == "fresh":
            trainer.validate(module, datamodule=dm, verbose=False)  # step 0: loss and FFN stats at init
        trainer.fit(module, datamodule=dm, ckpt_path=str(plan.ckpt) if plan.ckpt else None)
        # "finished" only once the final validation is done too: a stop inside it (SIGTERM, Ctrl-C, an error) leaves
        # the run to resume, so a rerun validates it, instead of a finished record without final metrics.
        if module.status == "running":  # the final validation: the periodic windows again, then data.final_val_tokens'
            dm.final = True
            trainer.validate(module, datamodule=dm, verbose=False)
        status = "finished" if module.status == "running" else module.status  # a NaN there is a divergence
        error = module.divergence if status == "diverged" else None
        exit_code = 0
    except BaseException as e:  # record the failure (Ctrl-C and SystemExit included), then let it propagate
        if (full := no_space(e)) is not None:  # one line, not the chained tracebacks of every write that followed
            saved = ckpt_cb.saved_step if ckpt_cb.saved_step >= 0 else plan.resumed_from
            error = disk_full_line(full, run, saved)
            raise DiskFull(error) from e
        stop = _stop_signal(e, preemption)
        if stop is None:
            error = f"{type(e).__name__}: {e}"
            if not isinstance(e, KeyboardInterrupt | SystemExit):
                error += "\n" + "".join(traceback.format_exception(e)[-3:])
            raise
        # SIGTERM, the pre-emption signal or Ctrl-C: an interruption, not a failure. last.ckpt holds the step it
        # stopped at (or the one before: PeriodicCheckpoint.on_exception); a rerun resumes from it.
        what, signum = stop
        saved = ckpt_cb.saved_step if ckpt_cb.saved_step >= 0 else plan.resumed_from
        status, exit_code = "interrupted", 128 + signum  # as a process ended by that signal: 130 / 143
        error = stopped_line(what, module.global_step, saved, ckpt_cb.path)
        if is_rank_zero:
            print(f"ffnbench: {run.run_dir.name}: {error}", file=sys.stderr, flush=True)
        raise SystemExit(exit_code) from e
    finally:
        if module._trainer is not None:
            with contextlib.suppress(Exception):  # best effort: the run is recorded whatever stopped it
                module.settle()
                for logger in trainer.loggers:  # the row settle() wrote, on disk and sent (after fit's finalize)
                    logger.save()
        module.status = status
        result = RunResult.from_training(
            status, error=error, config=run.config, run_dir=run.run_dir, model=run.model,
            history=module.val_history, last_train_loss=module.last_train_loss,
            steps=module.global_step if module._trainer is not None else 0, tokens_per_step=run.tokens_per_step,
            total_steps=run.total_steps, resumed_from=plan.resumed_from,
            data={**dm.info, "val_bytes_per_token": dm.val_bytes_per_token}, throughput=thr.summary(),
            device_setup=run.device_setup, started=started, compile=compiled.record(),
            train_history=module.train_history)
        if world.seen is not None:  # the processes that trained, as the process group counted them
            result.hardware["world_size"] = world.seen
        if is_rank_zero:
            try:
                result.write(run.run_dir)
            except OSError as write_error:
                if no_space(write_error) is None:
                    raise
                # the disk is still full: the line already says so, and the checkpoint it names is intact
            finish_wandb(exit_code, summary=result.wandb_summary())
        preemption.forward()  # under submitit: its handler requeues the job (which resumes) and exits
    if is_rank_zero:
        learned = not any(i.get("kind") == "no_learning" for i in result.instabilities or [])
        print(finished_line(status if learned else f"{status} without learning", result.metrics,
                            run.run_dir / RESULT_FILE))
    return result


def checkpoint_bytes(model: ModelConfig) -> int:
    """About what a checkpoint of this model takes: fp32 weights (mixed precision keeps fp32 ones) and AdamW's two
    moments for each, 12 bytes a parameter (the run's record and loops add a few kB)."""
    return 12 * count_params(model).total


def disk_full_line(error: OSError, run: Run, saved: int | None) -> str:
    """The one line of a run that found its disk full: the folder, its free space, what a checkpoint needs, and the
    rerun that resumes from the last checkpoint (kept intact: a checkpoint is written aside and renamed over it)."""
    folder = full_folder(error, run.run_dir)
    ckpt = last_checkpoint(run.run_dir)
    needed = max(checkpoint_bytes(run.model), ckpt.stat().st_size if ckpt.exists() else 0)
    free = free_bytes(folder)
    rerun = (f"resume from step {saved} ({ckpt})" if saved is not None and ckpt.exists() else "start it again")
    more = f"free at least {size_text(needed - free)} more there" if needed > free else "free space there"
    return (f"{run.run_dir.name}: disk full: {folder} has {size_text(free)} free and a checkpoint of this run needs "
            f"about {size_text(needed)}; {more}, then rerun the same command to {rerun}")


def _stop_signal(e: BaseException, preemption: PreemptionSignal) -> tuple[str, int] | None:
    """What stopped the run, when a signal did: (its name, its number) for SIGTERM or the pre-emption signal
    (Lightning's SIGTERMException; PreemptionSignal raises it for either) and for Ctrl-C (a KeyboardInterrupt, or the
    sys.exit(1) Lightning turns it into inside fit and validate); None for anything else."""
    if isinstance(e, SIGTERMException):
        return ("the pre-emption signal" if preemption.received else "SIGTERM"), int(signal.SIGTERM)
    if isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and isinstance(e.__context__, KeyboardInterrupt)):
        return "Ctrl-C", int(signal.SIGINT)
    return None


def final_validation_note(final_tokens: int, trained_tokens: int) -> str:
    """What the final validation costs, on the run's first line: data.final_val_tokens is one setting for every model
    (part of a run's identity, so its default stays), and on a small model it can take longer than the training."""
    return (f"final validation on {final_tokens:,} tokens (data.final_val_tokens), "
            f"{final_tokens / max(trained_tokens, 1):.2g}× the tokens it trains on")


def warmup_note(warmup_steps: int, total_steps: int) -> str | None:
    """One line when the warmup is not shorter than the run: the schedule cuts it to the run (optim.build_optimizer),
    so the lr reaches optim.lr only at the end, and nothing after warmup is judged (runs.instability). None
    otherwise."""
    if warmup_steps < total_steps:
        return None
    cut = max(0, total_steps - 1)
    return (f"optim.warmup_steps={warmup_steps} is not shorter than the run ({total_steps} steps): the warmup is cut "
            f"to {cut} steps, the lr peaks at the end, and no plateau, spike or stall after warmup is judged")


def sample_line(run_dir: Path) -> str:
    """The last line of a finished `ffnbench train`: the run's folder, as the command that samples from it."""
    try:
        shown = Path(run_dir).resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = Path(run_dir)
    return f"ffnbench: sample from it: ffnbench sample {shlex.quote(str(shown))}"


def stopped_line(what: str, step: int, saved: int | None, ckpt: Path) -> str:
    """The one line a stopped run prints (and records as its error): where it stopped, where it resumes from."""
    if saved is None:
        return f"stopped by {what} at step {step}; no checkpoint yet: rerun the same command to start it again"
    return f"stopped by {what} at step {step}; checkpoint at step {saved} ({ckpt}): rerun the same command to resume"


def finished_line(status: str, metrics: dict, path: Path) -> str:
    """The last line of a run: its status ("finished without learning" for a run whose record says so) and final
    losses, at 4 decimals (result.json keeps them in full)."""

    def shown(x: object) -> str:
        return f"{x:.4f}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)

    return (f"ffnbench: {status}: val loss {shown(metrics.get('final_val_loss'))}, "
            f"val bpb {shown(metrics.get('final_val_bpb'))} → {path}")


def _trainer(run: Run, devices: int | list[int], loggers: list, callbacks: list[L.Callback]) -> L.Trainer:
    t = run.trainer
    patch_ddp_child_command()
    return L.Trainer(
        accelerator=run.device_setup.accelerator,
        devices=devices,
        num_nodes=t.num_nodes,
        strategy=run.device_setup.strategy,
        plugins=[env] if (env := cluster_environment(run.device_setup, t.num_nodes)) is not None else None,
        precision=run.device_setup.precision,
        deterministic=t.deterministic,  # True: deterministic algorithms and CUBLAS_WORKSPACE_CONFIG; False resets
        max_steps=run.total_steps,
        max_epochs=-1,
        val_check_interval=t.val_every // run.data.inner_steps,  # in batches, each of inner_steps steps
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=loggers or False,
        callbacks=[*callbacks, *([StepProgressBar(t.log_every)] if t.progress_bar else [])],
        enable_checkpointing=False,  # PeriodicCheckpoint writes last.ckpt atomically
        enable_progress_bar=t.progress_bar,
        profiler=NoProfiler(),
        # every validation (step 0, in fit, final) under no_grad, as fit's own are, so all of them take one path (they
        # run eager in a compiled run: module.validation_step) and their accumulators are never inference tensors
        inference_mode=False,
        enable_model_summary=False,
        log_every_n_steps=t.log_every,
        use_distributed_sampler=False,  # the data module shards its own batches
        default_root_dir=str(run.run_dir),
    )


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
