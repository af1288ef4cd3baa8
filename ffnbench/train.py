"""Train one model: `python -m ffnbench.train [overrides]` (Hydra; `-m` for a sweep), or `train(cfg)`.

compose → check the run directory (skip finished, resume interrupted, refuse a different config) → data →
model → validate at step 0 → fit → final validation → result.json (atomic) next to metrics.csv,
checkpoints/last.ckpt and Hydra's .hydra/."""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from omegaconf import DictConfig

from ffnbench.accounting import count_flops, count_params
from ffnbench.callbacks import LAST_CKPT, PeriodicCheckpoint, StepTimes
from ffnbench.config import identity_diff, model_config, to_container
from ffnbench.errors import ConfigError, FFNBenchError, RunDirError
from ffnbench.ffn import size_ffn
from ffnbench.hardware import (
    GpuLease,
    Hardware,
    global_rank,
    parallel_jobs,
    patch_ddp_child_command,
    resolve_hardware,
)
from ffnbench.loggers import RunCSVLogger, finish_wandb, make_wandb_logger
from ffnbench.module import LMModule
from ffnbench.records import (
    FINAL_STATUSES,
    RESULT_FILE,
    RUN_CONFIG_FILE,
    CorruptRecord,
    ffn_record,
    git_revision,
    hardware,
    model_record,
    read_json,
    read_result,
    summary_key,
    versions,
    write_json_atomic,
)
from ffnbench.throughput import ThroughputMonitor, peak_flops
from ffnbench.tokenizer import vocab_size_for

CKPT_DIR = "checkpoints"


class _QuietLightning(logging.Filter):
    """Drop Lightning's advertising and a deprecation notice from its own internals; keep everything else."""

    NOISE = ("litlogger", "LitLogger", "isinstance(treespec, LeafSpec)")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in record.getMessage() for n in self.NOISE)


for _name in ("lightning.pytorch", "lightning.fabric", "lightning.pytorch.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(_QuietLightning())
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
# A diverged run's training_step returns None on purpose (module.py): that skips the step.
warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
# Validation metrics are all-reduced by the module itself (module.py), so Lightning's advice does not apply.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('(val|ffn)/")


# ---- where and on what ---------------------------------------------------------------------------------


def resolve_run_dir(cfg: DictConfig) -> Path:
    if cfg.get("run_dir"):
        return Path(cfg.run_dir).expanduser().resolve()
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    raise ConfigError("run_dir: not set; pass run_dir=<dir> when calling train() outside the Hydra entry point")


# ---- the run directory ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    action: str  # "skip" | "resume" | "fresh"
    ckpt: Path | None = None
    resumed_from: int | None = None  # the checkpoint's step, when resuming
    previous: dict | None = None  # the result.json found there, if any (the finished one, when skipping)


def plan_run(run_dir: Path, config: dict) -> RunPlan:
    """Decide what to do with a run directory: skip a finished run, resume an interrupted one, start fresh.
    A directory that holds a different config is refused, never silently reused."""
    saved_config_path = run_dir / RUN_CONFIG_FILE
    if saved_config_path.exists():
        try:
            saved = read_json(saved_config_path)
        except CorruptRecord as e:
            raise RunDirError(f"{e}; delete {saved_config_path} if the run directory is otherwise yours") from None
        diff = identity_diff(saved, config)
        if diff:
            shown = "; ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in list(diff.items())[:6])
            raise RunDirError(
                f"{run_dir} holds a run with a different config ({shown}{' ...' if len(diff) > 6 else ''}). "
                "It is not reused: pick another directory (run_dir=..., name=... or runs_root=...) or delete it."
            )
    try:
        previous = read_result(run_dir)
    except CorruptRecord as e:
        print(f"ffnbench: warning: {e}; the run will be resumed or redone", file=sys.stderr)
        previous = None
    if previous and previous.get("status") in FINAL_STATUSES:
        return RunPlan("skip", previous=previous)
    ckpt = run_dir / CKPT_DIR / LAST_CKPT
    if ckpt.exists():
        try:
            saved_ckpt = torch.load(ckpt, map_location="cpu", mmap=True, weights_only=False)
        except Exception as e:
            raise RunDirError(
                f"{ckpt} cannot be read ({type(e).__name__}: {e}); delete it to start this run over"
            ) from None
        diff = identity_diff(saved_ckpt.get("ffnbench", {}).get("fingerprint", {}), config)
        if diff:
            raise RunDirError(f"{ckpt} was written by a different config ({', '.join(diff)}); not resuming it")
        return RunPlan("resume", ckpt=ckpt, resumed_from=int(saved_ckpt["global_step"]), previous=previous)
    return RunPlan("fresh", previous=previous)


# ---- the record ------------------------------------------------------------------------------------------


def _tags(config: dict, spec) -> list[str]:
    return [
        f"act:{spec.act}",
        f"{spec.sizing}:{spec.ratio:g}",
        f"bias:{'on' if spec.bias else 'off'}",
        f"size:{config['model'].get('name', 'custom')}",
        f"seed:{config['seed']}",
    ]


def build_result(status: str, config: dict, run_dir: Path, mcfg, module: LMModule, dm, thr, hw: Hardware,
                 started: float, tokens_per_step: int, total_steps: int, resumed_from: int | None,
                 error: str | None) -> dict[str, Any]:
    spec = mcfg.ffn
    size = size_ffn(spec, mcfg.d_model)
    params = count_params(mcfg)
    flops = count_flops(mcfg)
    history = module.val_history
    steps = module.global_step if module._trainer is not None else 0
    finite = [h for h in history if h["val_loss"] is not None and math.isfinite(h["val_loss"])]
    final = history[-1] if history else None
    best = min(finite, key=lambda h: h["val_loss"]) if finite else None
    return {
        "schema": 1,
        "status": status,
        "error": error,
        "name": config.get("name"),
        "run_name": run_dir.name,
        "run_dir": str(run_dir),
        "seed": config.get("seed"),
        "config": config,
        "ffn": ffn_record(spec, size),
        "model": model_record(mcfg, config["model"].get("name")),
        "params": params.as_dict(),
        "flops": {"per_token_training": flops.training, "per_token_forward": flops.forward,
                  "total_training": flops.training * steps * tokens_per_step},
        "data": {**dm.info, "val_bytes_per_token": getattr(dm, "val_bytes_per_token", None)},
        "metrics": {  # records.METRICS
            "final_train_loss": module.last_train_loss,
            "final_val_loss": final["val_loss"] if final else None,
            "final_val_bpb": final["val_bpb"] if final else None,
            "best_val_loss": best["val_loss"] if best else None,
            "best_val_bpb": best["val_bpb"] if best else None,
            "init_val_loss": history[0]["val_loss"] if history and history[0]["step"] == 0 else None,
        },
        "ffn_stats": {
            "init": history[0]["ffn"] if history and history[0]["step"] == 0 else None,
            "final": final["ffn"] if final else None,
        },
        "curve": [{k: h[k] for k in ("step", "tokens", "val_loss", "val_bpb")} for h in history],
        "steps": steps,
        "total_steps": total_steps,
        "tokens": steps * tokens_per_step,
        "tokens_per_step": tokens_per_step,
        "resumed_from_step": resumed_from,
        "throughput": thr.summary(),
        "wall_time_s": time.time() - started,
        "hardware": {**hardware(hw.accelerator), "devices": hw.devices, "precision": hw.precision,
                     "strategy": hw.strategy},
        "versions": versions(),
        "git": git_revision(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# ---- training ---------------------------------------------------------------------------------------------


def train(cfg: DictConfig, callbacks: list[L.Callback] | None = None) -> dict[str, Any]:
    """Train one model as `cfg` says and return its result record (also written to <run_dir>/result.json)."""
    from ffnbench.data import LMDataModule

    started = time.time()
    step_times = StepTimes.from_env()
    if step_times:
        step_times.mark("train_start")
    config = to_container(cfg)
    run_dir = resolve_run_dir(cfg)
    mcfg = model_config(cfg, vocab_size_for(cfg.data))  # every config error surfaces here, before any work
    hw = resolve_hardware(cfg.trainer)
    t = cfg.trainer
    tokens_per_step = int(cfg.data.batch_size) * mcfg.seq_len
    total_steps = int(t.max_steps) if t.get("max_steps") else math.ceil(float(t.max_tokens) / tokens_per_step)
    if total_steps < 1:
        raise ConfigError(f"trainer.max_tokens / trainer.max_steps: the budget gives {total_steps} steps")
    is_rank_zero = global_rank() == 0

    plan = plan_run(run_dir, config)
    if plan.action == "skip":
        print(f"ffnbench: {run_dir.name}: already {plan.previous['status']}, skipped ({run_dir / RESULT_FILE})")
        return plan.previous
    if is_rank_zero:
        write_json_atomic(run_dir / RUN_CONFIG_FILE, config)
    resumed_from = plan.resumed_from

    processes = hw.devices * parallel_jobs()
    if hw.accelerator == "cpu" and processes > 1:  # share the cores, not every process on every core
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))
    devices: int | list[int] = hw.devices
    lease = None
    if hw.accelerator == "gpu":
        torch.set_float32_matmul_precision("high")
        if hw.devices == 1 and torch.cuda.device_count() > 1 and "SLURM_JOB_ID" not in os.environ:
            lease = GpuLease(torch.cuda.device_count())
            devices = [lease.index]
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)

    dm = LMDataModule(cfg.data, seq_len=mcfg.seq_len, seed=int(cfg.seed))
    dm.prepare_data()
    dm.setup("fit")
    if step_times:
        step_times.mark("data_ready")
    flops = count_flops(mcfg)
    peak, peak_source = peak_flops(hw.accelerator, hw.precision, t.get("peak_flops"), _cache_dir(cfg))
    module = LMModule(
        mcfg, dict(cfg.optim), seed=int(cfg.seed), total_steps=total_steps, tokens_per_step=tokens_per_step,
        val_bytes_per_token=dm.val_bytes_per_token, log_every=int(t.log_every), compile=bool(t.compile),
        fingerprint=config,
    )
    thr = ThroughputMonitor(tokens_per_step, flops.training, peak, hw.devices * int(t.get("num_nodes", 1)),
                            log_every=int(t.log_every), peak_source=peak_source)
    ckpt_cb = PeriodicCheckpoint(run_dir / CKPT_DIR / LAST_CKPT, int(t.ckpt_every), int(t.val_every))
    (run_dir / CKPT_DIR).mkdir(parents=True, exist_ok=True)

    loggers: list = []
    lcfg = cfg.logger
    if lcfg.get("csv"):
        loggers.append(RunCSVLogger(run_dir, resume_step=resumed_from))
    if lcfg.get("wandb") and is_rank_zero:
        loggers.append(make_wandb_logger(to_container(lcfg.wandb), run_dir, str(cfg.name), run_dir.name,
                                         _tags(config, mcfg.ffn), config))

    patch_ddp_child_command()
    trainer = L.Trainer(
        accelerator=hw.accelerator,
        devices=devices,
        num_nodes=int(t.get("num_nodes", 1)),
        strategy=hw.strategy,
        precision=hw.precision,
        max_steps=total_steps,
        max_epochs=-1,
        val_check_interval=int(t.val_every),
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=loggers or False,
        callbacks=[thr, ckpt_cb, *([step_times] if step_times else []), *(callbacks or [])],
        enable_checkpointing=False,  # PeriodicCheckpoint writes last.ckpt atomically
        enable_progress_bar=bool(t.progress_bar),
        enable_model_summary=False,
        log_every_n_steps=int(t.log_every),
        use_distributed_sampler=False,  # the data module shards its own batches
        default_root_dir=str(run_dir),
    )
    if is_rank_zero:
        print(f"ffnbench: {run_dir.name}: {mcfg.ffn.label}, d_ff={size_ffn(mcfg.ffn, mcfg.d_model).d_ff}, "
              f"{count_params(mcfg).total:,} params, {total_steps} steps × {tokens_per_step} tokens on "
              f"{hw.accelerator} ({hw.precision}); peak {peak or 0:.3g} FLOP/s ({peak_source})")

    status, error, exit_code = "failed", None, 1
    try:
        if plan.action == "fresh":
            trainer.validate(module, datamodule=dm, verbose=False)  # step 0: loss and FFN stats at init
        trainer.fit(module, datamodule=dm, ckpt_path=str(plan.ckpt) if plan.ckpt else None)
        status = "finished" if module.status == "running" else module.status
        if status == "finished" and (not module.val_history or module.val_history[-1]["step"] != trainer.global_step):
            trainer.validate(module, datamodule=dm, verbose=False)  # the final metrics are at the last step
        if status == "diverged":
            error = getattr(module, "divergence", None)
        exit_code = 0
    except BaseException as e:  # record the failure (Ctrl-C and SystemExit included), then let it propagate
        error = f"{type(e).__name__}: {e}"
        if not isinstance(e, KeyboardInterrupt | SystemExit):
            error += "\n" + "".join(traceback.format_exception(e)[-3:])
        raise
    finally:
        module.status = status
        result = build_result(status, config, run_dir, mcfg, module, dm, thr, hw, started, tokens_per_step,
                              total_steps, resumed_from, error)
        if is_rank_zero:
            write_json_atomic(run_dir / RESULT_FILE, result)
            finish_wandb(exit_code, summary=_summary(result))
        if lease is not None:
            lease.release()
    if is_rank_zero:
        m = result["metrics"]
        print(f"ffnbench: {status}: val loss {m['final_val_loss']}, val bpb {m['final_val_bpb']} → "
              f"{run_dir / RESULT_FILE}")
    return result


def _summary(result: dict) -> dict[str, Any]:
    thr = result.get("throughput") or {}
    stats = (result.get("ffn_stats") or {}).get("final") or {}
    return {
        **{summary_key(k): v for k, v in result["metrics"].items()},
        "status": result["status"],
        "tokens": result["tokens"],
        "params/total": result["params"]["total"],
        "params/ffn_per_layer": result["ffn"]["params_per_layer"],
        "ffn/d_ff": result["ffn"]["d_ff"],
        "perf/tokens_per_s": thr.get("tokens_per_s"),
        "perf/mfu": thr.get("mfu"),
        **{f"final/ffn_{k}": v for k, v in (stats.get("mean") or {}).items()},
    }


def _cache_dir(cfg: DictConfig) -> Path:
    return Path(str(cfg.data.cache_dir)).expanduser()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> str:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        return train(cfg)["status"]
    except FFNBenchError as e:
        print(f"ffnbench: error: {e}", file=sys.stderr)
        if multirun:
            return "failed"  # one bad run does not stop the sweep; the sweep summary counts it
        sys.exit(2)
    except Exception:
        if multirun:  # result.json already says failed, with the error; the other runs go on
            traceback.print_exc()
            return "failed"
        raise


if __name__ == "__main__":
    main()
