"""The pipeline-overhead benchmark: tokens/s of `train()` ÷ tokens/s of the hand loop over the same model and
batches, timed side by side inside one run (contenders.Alternation), at a step the size of a small model's step on a
GPU (a few milliseconds, where the pipeline's fixed cost per step decides throughput) and at tiny and small
(overhead_compare.py); where the pipeline's per-step time goes (a profile against the hand loop's,
overhead_profile.py); what Lightning's own loop costs a step (overhead_floor.py); and what the FFN activation
statistics (gathered in validation only) cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ffnbench.bench.contenders import pipeline_overrides
from ffnbench.bench.overhead_compare import GPU_SIZED_MS, choose_gpu_sized, compare
from ffnbench.bench.overhead_floor import lightning_floor
from ffnbench.bench.overhead_profile import profile
from ffnbench.bench.render import goal, median_iqr, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import load_snapshot
from ffnbench.tables import fmt

NAME = "overhead"
TITLE = "Pipeline overhead"
SUMMARY = ("tokens/s of the real pipeline (train(): Lightning, logging, callbacks) ÷ tokens/s of a minimal "
           "hand-written PyTorch loop over the same model, batches, AdamW and clipping")


@dataclass(frozen=True)
class Sizes:
    """How much the overhead benchmark does."""

    models: tuple[str, ...]  # measured besides the GPU-sized step
    gpu_sized: tuple[str, ...]  # the candidates for the GPU-sized step, smallest first
    steps: dict[str, tuple[int, int, int]]  # model -> (warm-up steps, timed steps per window, windows)
    batch: dict[str, int]  # a global batch other than the user's default, per model
    reps: int  # repetitions of the FFN statistics' validation batch
    profile_steps: int  # steps profiled (0: no profile)
    floor_steps: int  # steps of Lightning's loop around a one-parameter model (0: not measured)


SIZES: Mapping[str, Sizes] = {
    "quick": Sizes(models=(), gpu_sized=("micro",), steps={"micro": (10, 10, 2)}, batch={}, reps=2, profile_steps=10,
                   floor_steps=20),
    "gpu": Sizes(models=("tiny", "small"), gpu_sized=("micro", "tiny", "small"),
                 steps={"micro": (30, 100, 30), "tiny": (30, 100, 30), "small": (20, 50, 20)}, batch={}, reps=5,
                 profile_steps=200, floor_steps=1000),
    # small at the MFU benchmark's batch of 4: at 32 a CPU step takes tens of seconds
    "cpu": Sizes(models=("tiny", "small"), gpu_sized=("micro", "tiny", "small"),
                 # windows of ~0.5 s or more, made of turns of a pipeline batch each (trainer.inner_steps: 10 at the
                 # defaults; the overhead rounds step counts up to whole batches, so these are multiples of it); tiny
                 # and small take one turn a window, seconds long, whose ratio still varies by ±10% here: 20 and 8
                 # windows narrow their median
                 steps={"micro": (20, 100, 40), "tiny": (10, 10, 20), "small": (10, 10, 8)}, batch={"small": 4},
                 reps=6, profile_steps=200, floor_steps=1000),
}


def measure(session: BenchSession) -> dict[str, Any]:
    """The overhead record: settings, load, the GPU-sized row then one per model of `Sizes.models`, the profile,
    Lightning's floor, notes."""
    s: Sizes = session.sizes[NAME]
    stats_reps = max(3, s.reps)
    load = {"before": load_snapshot()}
    chosen, batch, measured = choose_gpu_sized(session, s.gpu_sized)
    rows = [compare(session, chosen, s.steps[chosen], gpu_sized=True, stats_reps=stats_reps,
                    batch=batch or s.batch.get(chosen))]
    rows += [compare(session, model, s.steps[model], stats_reps=stats_reps, batch=s.batch.get(model))
             for model in s.models if (model, None) != (chosen, batch)]
    models = [r["model"] for r in rows]
    prof = profile(session, chosen, s.profile_steps, batch=batch) if s.profile_steps else None
    floor = lightning_floor(session, s.floor_steps) if s.floor_steps else None
    load["after"] = load_snapshot()
    settings = {"overrides": [pipeline_overrides(session, r["model"], r["batch_size"]) for r in rows],
                "steps": {m: s.steps[m] for m in models}, "gpu_sized_ms": list(GPU_SIZED_MS),
                "gpu_sized_candidates_ms": measured, "device": str(session.device), "compile": session.gpu,
                "precision": session.precision,
                "hand_loop": "GPT + optim.build_optimizer (same AdamW, schedule) + clip_grad_norm_ + the same "
                             "data windows and compilation; loss.item() once per log_every steps",
                "excluded": "validation and checkpoints (outside the timed windows), process and Trainer start-up"}
    return {"settings": settings, "load": load, "rows": rows, "profile": prof, "lightning_floor": floor,
            "notes": _notes(rows, measured, prof, floor)}


def _notes(rows: list[dict], measured: dict[str, float], prof: dict | None, floor: dict | None) -> list[str]:
    """What the record's figures mean, with the sizes they were measured at."""
    low, high = GPU_SIZED_MS
    gpu_row = next(r for r in rows if r["gpu_sized"])
    chosen = f"{gpu_row['model']} at batch {gpu_row['batch_size']}"
    notes = [
        "ratio = pipeline ÷ hand loop, window by window: the two take turns inside one train() run, a pipeline batch "
        "(trainer.inner_steps steps) then as many hand-loop steps (run inside a callback at the batch's end), so "
        "whatever else loads the machine hits both alike; a window sums its turns' times; median ± IQR/2 over the "
        "windows (" +
        ", ".join(f"{r['model']} {r['warmup_steps']} warm-up + {r['windows']} windows × {r['window_steps']} steps "
                  f"in turns of {r['turn_steps']}" for r in rows) +
        "); extra ms/step = the pipeline's time per step minus the hand loop's (medians)",
        "GPU-sized step: the hand-loop steps measured here were " +
        ", ".join(f"{m} {ms:.3g} ms" for m, ms in measured.items()) +
        f"; {chosen} is nearest the middle of {low:g}–{high:g} ms (what tiny and small take per step on a GPU, "
        "where the pipeline's fixed cost per step decides throughput; a machine too slow for the smallest preset "
        "at the user's batch gets it at a smaller batch)",
        "pipeline = ffnbench.train.train() as `python -m ffnbench.train` runs it: Lightning Trainer, LMModule "
        "(metrics written every trainer.log_every steps), ThroughputMonitor, PeriodicCheckpoint, progress bar, CSV "
        "logger (wandb: see startup); validation and checkpoints fall outside the timed steps. hand loop = the same "
        "GPT, batches, AdamW, schedule, clipping and compilation; the loss read once per log_every steps; nothing "
        "else",
        "FFN statistics are gathered during validation only (a training step never computes them): a validation "
        "batch's throughput with them on ÷ off, and their extra time as a share of training time at the defaults",
    ]
    if prof:
        top = "; ".join(f"{e['function']} ({e['calls_per_step']:.0f} calls, {e['own_ms_per_step']:.2f} ms)"
                        for e in prof["top_beyond_hand"][:8])
        notes.append(f"profile after ({prof['model']}, cProfile over {prof['steps']} steps): the pipeline makes "
                     f"{prof['pipeline_calls_per_step']:.0f} Python calls a step, the hand loop "
                     f"{prof['hand_calls_per_step']:.0f}; the calls beyond the hand loop's take "
                     f"{prof['beyond_hand_own_ms_per_step']:.2f} ms of own time a step under the profiler, most in: "
                     f"{top}")
    if floor:
        hand_ms, extra = gpu_row["hand_ms_per_step"]["median"], floor["extra_ms_per_step"]
        k = gpu_row["turn_steps"]
        per_step = {q: extra[q] / k for q in ("p5", "median")}
        notes.append(f"Lightning's own loop (a one-parameter model trained by a Trainer set up as train() sets it up, "
                     f"no logger or callback, a step a batch, against the same hand loop; {floor['reps']} × "
                     f"{floor['steps']} steps each): {extra['p5']:.3f} ms a batch more at the 5th percentile, "
                     f"{extra['median']:.3f} ms at the median. A step a batch, it alone would cap the ratio on the "
                     f"GPU-sized step ({gpu_row['model']}, {hand_ms:.3g} ms) at "
                     f"{hand_ms / (hand_ms + extra['median']):.3f} (median); the pipeline pays it once per batch of "
                     f"trainer.inner_steps = {k} steps, {per_step['median']:.3f} ms a step (a cap of "
                     f"{hand_ms / (hand_ms + per_step['median']):.3f})")
    return notes


def tables(record: Mapping[str, Any]) -> list[str]:
    """One row per model, then the profile's functions beyond the hand loop's (when profiled)."""
    header = ["model", "tokens/step", "hand ms/step", "hand loop tok/s", "pipeline tok/s", "pipeline ÷ hand",
              "extra ms/step", "goal", "val batch, FFN stats on ÷ off", "FFN stats cost of training"]
    out = [table(header, [
        [r["model"] + (" (GPU-sized step)" if r["gpu_sized"] else ""), r["tokens_per_step"],
         median_iqr(r["hand_ms_per_step"], ".3g"), median_iqr(r["hand_tokens_per_s"], ".0f"),
         median_iqr(r["pipeline_tokens_per_s"], ".0f"), median_iqr(r["ratio"], ".3f"),
         fmt(r["pipeline_ms_per_step_extra"], "+.3f"), goal(r["meets_goal"], f"≥ {r['goal']}"),
         median_iqr(r.get("val_stats_ratio"), ".3f"), fmt(r.get("stats_cost_of_training"), ".2%")]
        for r in record["rows"]])]
    prof = record.get("profile")
    if prof:
        out.append(table(
            [f"calls beyond the hand loop's ({prof['model']}, cProfile)", "calls/step", "own ms/step"],
            [[e["function"], fmt(e["calls_per_step"], ".3g"), fmt(e["own_ms_per_step"], ".3f")]
             for e in prof["top_beyond_hand"]]))
    return out
