"""Fit one checked run (`fit_run`): build the LightningModule, its callbacks and the Trainer, validate at step 0
on a fresh start, train, validate at the last step, and record the run in result.json whatever stops it (a
failure, a full disk, SIGTERM, Ctrl-C, a divergence); with the lines a run prints. train.py calls it once the run
is checked, locked and planned."""

from __future__ import annotations

import contextlib
import signal
import sys
import traceback
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ffnbench.ddp import cluster_environment, global_rank, patch_ddp_child_command
from ffnbench.fileio import DiskFull, free_bytes, full_folder, no_space, size_text
from ffnbench.model.accounting import count_flops, count_params
from ffnbench.model.ffn import size_ffn
from ffnbench.model.model import ModelConfig
from ffnbench.runcheck import Run
from ffnbench.runs.result import RESULT_FILE, RunResult
from ffnbench.runs.rundir import RunPlan, last_checkpoint
from ffnbench.training.callbacks import (
    NoProfiler,
    PeriodicCheckpoint,
    PreemptionSignal,
    StepProgressBar,
    WorldSizeCheck,
)
from ffnbench.training.compiling import CompileWatch
from ffnbench.training.loggers import finish_wandb, make_loggers
from ffnbench.training.module import LMModule
from ffnbench.training.throughput import ThroughputMonitor, peak_flops


def fit_run(run: Run, plan: RunPlan, devices: int | list[int], started: float,
            callbacks: list[L.Callback]) -> RunResult:
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


def _stop_signal(e: BaseException, preemption: PreemptionSignal) -> tuple[str, int] | None:
    """What stopped the run, when a signal did: (its name, its number) for SIGTERM or the pre-emption signal
    (Lightning's SIGTERMException; PreemptionSignal raises it for either) and for Ctrl-C (a KeyboardInterrupt, or the
    sys.exit(1) Lightning turns it into inside fit and validate); None for anything else."""
    if isinstance(e, SIGTERMException):
        return ("the pre-emption signal" if preemption.received else "SIGTERM"), int(signal.SIGTERM)
    if isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and isinstance(e.__context__, KeyboardInterrupt)):
        return "Ctrl-C", int(signal.SIGINT)
    return None


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
