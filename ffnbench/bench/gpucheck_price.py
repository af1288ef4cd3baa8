"""The `price` block of gpucheck.json: what a sweep run costs on this machine, for ffnbench.sweep.cost to read.

Its shape is a contract with the sweep's price (docs/benchmarks.md): `gpu` (the name as the record's machine.gpu has
it), `mfu` and `overhead_s_per_run` by model group (the model preset a sweep's arm trains: small, base), and
`attention_flops` ("causal": MFU counts attention as a causal kernel computes it). Keys may be added, never renamed.

A run's fixed overhead is what it pays besides its training steps, measured on the training check of its group
(gpucheck_train.run_clock) and scaled to the sweep run's own validation sets and checkpoint count:

    process start (interpreter, imports, Hydra composition; a subprocess)
  + setup: train() called → end of the first step (data load, model, Trainer, the compiles) − the check's own
    step-0 validation at its warm rate − one step at the measured tokens/s
  + (1 + validations in fit) × one validation pass of data.val_tokens at the warm validation rate
  + the final validation (data.val_tokens + data.final_val_tokens)
  + checkpoints written × one checkpoint
  + compilations after the first step (none in a run that compiles once)

wandb's start-up is not in it (the check logs to CSV; the startup benchmark measures it)."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from typing import Any

PRICE_EXPERIMENT = "activations"  # the GPU claim experiment whose runs are priced (conf/experiment/_gpu.yaml)


def process_start(overrides: list[str], timeout: float = 300) -> dict[str, Any]:
    """Seconds of `python -m ffnbench.train <overrides> --cfg job`: the interpreter, the imports and Hydra's
    composition a sweep run pays before train() is called (it prints the config and exits)."""
    command = [sys.executable, "-m", "ffnbench.train", *overrides, "--cfg", "job"]
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{shlex.join(command[1:])} failed ({out.returncode}): {(out.stdout + out.stderr)[-1000:]}")
    return {"command": shlex.join(["python", *command[1:]]), "seconds": seconds}


def validation_counts(steps: int, val_every: int, ckpt_every: int) -> tuple[int, int]:
    """(validations inside fit, checkpoints written) of a fresh run of `steps` steps, as fit.py makes them: a
    validation every val_every steps (besides step 0's and the final one), a checkpoint every ckpt_every steps and
    one at the end when the last step is not such a step."""
    return steps // val_every, steps // ckpt_every + (1 if steps % ckpt_every else 0)


def sweep_run(experiment: str, group_overrides: list[str]) -> dict[str, Any]:
    """What one run of `experiment` in a model group does besides training: its steps, validation sets, and how
    many validations and checkpoints it makes (fit.py: validation at step 0, every val_every steps in fit, and a
    final one over val_tokens + final_val_tokens; a checkpoint every ckpt_every steps and at the end)."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import run_spec
    from ffnbench.data.tokenizer import vocab_size_for

    cfg = compose([f"experiment={experiment}", *group_overrides])
    spec = run_spec(cfg, vocab_size_for(cfg.data))
    tokens_per_step = int(cfg.data.batch_size) * spec.model.seq_len
    steps = spec.total_steps(tokens_per_step)
    validations, checkpoints = validation_counts(steps, int(cfg.trainer.val_every), int(cfg.trainer.ckpt_every))
    return {"experiment": experiment, "overrides": list(group_overrides), "steps": steps,
            "tokens_per_step": tokens_per_step, "val_tokens": int(cfg.data.val_tokens),
            "final_val_tokens": int(cfg.data.final_val_tokens or cfg.data.val_tokens),
            "validations_in_fit": validations, "checkpoints": checkpoints}


def run_overhead(row: dict[str, Any], process_s: float, run: dict[str, Any]) -> dict[str, Any] | None:
    """A sweep run's fixed overhead in seconds, its parts, from a training check's row (gpucheck_train.train_check)
    and the sweep run it stands for (sweep_run). None where the row lacks a figure it needs."""
    clock, compiled = row.get("clock") or {}, row.get("compilations") or {}
    first, val_tps, ckpt = clock.get("start_to_first_step_s"), clock.get("val_tokens_per_s"), clock.get("checkpoint_s")
    tps = row.get("tokens_per_s")
    passes = clock.get("val_passes") or []
    if None in (first, val_tps, ckpt, tps) or not passes:
        return None
    own_val = passes[0]["tokens"] / val_tps  # the check's step-0 validation, at the warm rate
    setup = first - own_val - row["tokens_per_step"] / tps
    val_pass = run["val_tokens"] / val_tps
    parts = {"process_start_s": process_s,
             "setup_s": setup,  # compiles included
             "compile_s": compiled.get("seconds"),  # part of setup_s (and of late_compile_s)
             "val_pass_s": val_pass, "val_passes": 1 + run["validations_in_fit"],
             "final_val_s": (run["val_tokens"] + run["final_val_tokens"]) / val_tps,
             "checkpoint_s": ckpt, "checkpoint_bytes": clock.get("checkpoint_bytes"),
             "checkpoints": run["checkpoints"],
             "late_compile_s": compiled.get("seconds_after_first_step") or 0.0}
    parts["total_s"] = (process_s + setup + parts["val_passes"] * val_pass + parts["final_val_s"]
                        + run["checkpoints"] * ckpt + parts["late_compile_s"])
    return parts


def price_block(gpu: str | None, rows: list[dict[str, Any]], process_s: float | None,
                runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The `price` block from the training rows measured so far: per model group, the MFU of its priced run (the
    sweep's own shape) and a sweep run's fixed overhead (run_overhead). A group whose run did not finish is left
    out; one whose run finished with a problem (a recompile, a graph break) is priced, and its problems listed."""
    mfu, overhead, parts, peak, problems = {}, {}, {}, {}, {}
    for row in rows:
        group = row.get("group")
        if not group or group in peak or row.get("status") != "finished":
            continue
        peak[group] = row.get("peak_flops")
        if row.get("problems"):
            problems[group] = row["problems"]
        if row.get("mfu"):
            mfu[group] = row["mfu"]
        if process_s is not None and group in runs:
            cost = run_overhead(row, process_s, runs[group])
            if cost:
                overhead[group], parts[group] = cost["total_s"], cost
    return {"gpu": gpu, "mfu": mfu, "overhead_s_per_run": overhead, "attention_flops": "causal",
            "peak_flops": peak, "overhead_parts": parts, "sweep_runs": runs, "problems": problems,
            "basis": "mfu: the group's training check at the sweep's shape (ThroughputMonitor, validation "
                     "excluded), of the peak in peak_flops; overhead_s_per_run: process start + setup (compiles "
                     "included) + the sweep run's validations and checkpoints at the measured rates "
                     "(docs/benchmarks.md#the-price-block); wandb start-up not included"}
