"""Benchmark 1, pipeline overhead: tokens/s of `train()` ÷ tokens/s of the hand loop over the same model and
batches, and what the FFN activation statistics (gathered in validation only) cost."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ffnbench.bench.contenders import HandLoop, Pipeline, hand_trial, pipeline_overrides
from ffnbench.bench.session import GOALS, BenchSession
from ffnbench.bench.timing import interleaved, load_snapshot, paired_ratios, quartiles, time_call


def _stats_trial(session: BenchSession, cfg, with_stats: bool, inner: int) -> Callable[[], float]:
    """Seconds per validation forward of one batch, with or without the FFN activation statistics."""
    from ffnbench.ffn import ActivationStats

    loop = HandLoop(session, cfg)
    model = loop.model.eval()
    x, y = (t.to(session.device) for t in loop.batches(0))

    def forward() -> None:
        with torch.no_grad(), session.autocast():
            model(x, y)

    def trial() -> float:
        for ffn in model.ffns:
            ffn.stats = ActivationStats(ffn.size.d_ff, session.device) if with_stats else None
        forward()  # warm-up (and the first compile)
        seconds = time_call(forward, session.device, inner)
        for ffn in model.ffns:
            ffn.stats = None
        return seconds

    return trial


def _row(session: BenchSession, model: str, pipeline: Pipeline, results: dict, stats: dict,
         val_every: int, val_tokens: int) -> dict[str, Any]:
    """One model's row: the two contenders' tokens/s, their paired ratio, and the statistics' cost."""
    tps = pipeline.tokens_per_step
    ratios = paired_ratios(results["pipeline"], results["hand"])
    hand_s, pipe_s, ratio_s = quartiles(results["hand"]), quartiles(results["pipeline"]), quartiles(ratios)
    step_s = tps / pipe_s["median"]
    # FFN statistics: gathered in validation only. Cost of a validation batch with them ÷ without, and that
    # extra cost spread over the training steps between two validations at the default settings.
    val_batches = math.ceil(max(1, val_tokens // pipeline.seq_len) / pipeline.batch_size)
    extra_s = val_batches * (quartiles(stats["on"])["median"] - quartiles(stats["off"])["median"])
    goal = session.quick or model != "micro"  # micro: a probe of the per-step cost, not a model anyone trains
    return {
        "model": model, "batch_size": pipeline.batch_size, "seq_len": pipeline.seq_len, "tokens_per_step": tps,
        "warmup_steps": pipeline.warmup, "timed_steps": pipeline.steps,
        "hand_tokens_per_s": hand_s,
        "pipeline_tokens_per_s": pipe_s,
        "ratio": ratio_s,
        "pipeline_ms_per_step_extra": 1e3 * tps * (1 / pipe_s["median"] - 1 / hand_s["median"]),
        "pipeline_monitor_tokens_per_s": quartiles(pipeline.monitor_readings) if pipeline.monitor_readings
        else None,
        "val_stats_ratio": quartiles(paired_ratios(stats["off"], stats["on"])),  # throughput, on ÷ off
        "val_batch_ms": {"stats_off": quartiles([1e3 * t for t in stats["off"]]),
                         "stats_on": quartiles([1e3 * t for t in stats["on"]])},
        "stats_cost_of_training": extra_s / (val_every * step_s),
        "stats_cost_basis": f"{val_batches} validation batches (data.val_tokens={val_tokens}) every "
                            f"trainer.val_every={val_every} steps",
        "raw": {"hand": results["hand"], "pipeline": results["pipeline"], "stats_off_s": stats["off"],
                "stats_on_s": stats["on"]},
        "goal": GOALS["overhead_ratio"] if goal else None,
        "meets_goal": ratio_s["median"] >= GOALS["overhead_ratio"] if goal else None,
    }


def _notes(session: BenchSession, val_every: int, val_tokens: int) -> list[str]:
    s = session.sizes
    notes = [f"median ± IQR/2 over {s.overhead_reps} interleaved repetitions (steps per repetition: "
             + ", ".join(f"{m} {w} warm-up + {n} timed" for m, (w, n) in s.overhead_steps.items()) + "); "
             "ratio = pipeline ÷ hand loop per repetition; extra ms/step = the pipeline's time per step minus "
             "the hand loop's (medians)",
             "pipeline = ffnbench.train.train() as `python -m ffnbench.train` runs it: Lightning Trainer, LMModule "
             "logging, ThroughputMonitor, PeriodicCheckpoint, progress bar, CSV logger (wandb: see startup); "
             "validation and checkpoints fall "
             "outside the timed steps. hand loop = the same GPT, batches, AdamW, schedule, clipping; nothing else",
             "FFN statistics are gathered during validation only (a training step never computes them): a "
             "validation batch's throughput with them on ÷ off, and their extra time as a share of training time "
             f"at the defaults (validation on {val_tokens} tokens every {val_every} steps)"]
    if "micro" in s.overhead_models and not session.quick:
        notes.append("micro (d=32, 2 layers) is there to expose the per-step cost of the pipeline's Python: its steps "
                     "take a few milliseconds, so the goal is not applied to it")
    return notes


def measure(session: BenchSession) -> dict[str, Any]:
    """The overhead record: settings, load, one row per model of `sizes.overhead_models`, notes."""
    from ffnbench.config import compose

    s = session.sizes
    defaults = compose([])  # what a run validates by default: how often, and on how many tokens
    val_every, val_tokens = int(defaults.trainer.val_every), int(defaults.data.val_tokens)
    rows = []
    load = {"before": load_snapshot()}
    for model in s.overhead_models:
        warmup, steps = s.overhead_steps[model]
        pipeline = Pipeline(session, pipeline_overrides(session, model), warmup, steps)
        cfg = pipeline.cfg
        results = interleaved({"hand": hand_trial(session, cfg, warmup, steps), "pipeline": pipeline},
                              s.overhead_reps)
        stats = interleaved({"off": _stats_trial(session, cfg, False, 3), "on": _stats_trial(session, cfg, True, 3)},
                            max(3, s.overhead_reps))
        rows.append(_row(session, model, pipeline, results, stats, val_every, val_tokens))
    load["after"] = load_snapshot()
    settings = {"overrides": {m: pipeline_overrides(session, m) for m in s.overhead_models},
                "steps": s.overhead_steps, "reps": s.overhead_reps, "device": str(session.device),
                "compile": session.gpu, "precision": session.precision,
                "hand_loop": "GPT + module.build_optimizer (same AdamW, schedule) + clip_grad_norm_ + the same "
                             "data windows; loss.item() once per log_every steps",
                "excluded": "validation and checkpoints (outside the timed window), process and Trainer start-up"}
    return {"settings": settings, "load": load, "rows": rows, "notes": _notes(session, val_every, val_tokens)}
