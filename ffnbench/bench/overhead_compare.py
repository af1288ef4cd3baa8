"""The overhead benchmark's rows: one model's pipeline and hand loop timed side by side inside one run, their paired
ratio, and what the FFN activation statistics (gathered in validation only) cost; and the choice of the GPU-sized
step, the model preset and batch whose hand-loop step here is as long as tiny's and small's on a GPU.

`compare` is one model's row for any trainer options (e.g. trainer.compile_mode=reduce-overhead)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ffnbench.bench.contenders import HandLoop, alternate, pipeline_overrides
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import interleaved, paired_ratios, quartiles, time_call

# The hand-loop step a "GPU-sized" model takes: what tiny and small take on a GPU. The benchmark measures the model
# presets' hand-loop steps on this machine and picks the one nearest the middle of this range (geometrically).
GPU_SIZED_MS = (2.0, 10.0)
RATIO_GOAL = 0.95  # pipeline ÷ hand loop, what `make bench` aims for (docs/benchmarks.md); each row says if met


def hand_step_ms(session: BenchSession, model: str, batch: int | None = None, warmup: int = 3,
                 steps: int = 5) -> float:
    """Milliseconds per step of the hand loop on `model` at global batch `batch` (None: the user's), after `warmup`
    steps."""
    from ffnbench.config.compose import compose

    cfg = compose([*pipeline_overrides(session, model, batch), f"trainer.max_steps={warmup + steps}",
                   f"run_dir={session.work / 'unused'}"])
    loop = HandLoop(session, cfg, compile=bool(cfg.trainer.compile), compile_mode=str(cfg.trainer.compile_mode))
    for _ in range(warmup):
        loop.step()
    return 1e3 * time_call(loop.step, session.device, inner=steps)


def choose_gpu_sized(session: BenchSession, candidates: Sequence[str]) -> tuple[str, int | None, dict[str, float]]:
    """The GPU-sized step: the model preset, and batch, whose hand-loop step here is nearest the middle of
    GPU_SIZED_MS (log scale), preferring one inside the range. The `candidates` (model presets, smallest first) are
    tried at the user's batch, and the search stops at the first above the range; when even the smallest is above it
    (a slow machine), its batch is halved until its step is below the middle. Returns the model, the batch (None: the
    user's) and the step times measured, by 'model (batch b)'."""
    low, high = GPU_SIZED_MS
    middle = math.sqrt(low * high)
    measured: dict[str, float] = {}
    choices: dict[str, tuple[str, int | None]] = {}

    def measure(model: str, batch: int | None) -> float:
        label = f"{model} (batch {batch})" if batch else model
        measured[label], choices[label] = hand_step_ms(session, model, batch), (model, batch)
        return measured[label]

    for model in candidates:
        if measure(model, None) > high:
            break
    smallest = candidates[0]
    if measured[smallest] > high:
        from ffnbench.config.compose import compose

        batch = int(compose([f"model={smallest}"]).data.batch_size)
        while batch > 1:  # down to the middle of the range, then the nearest to it is taken
            batch //= 2
            if measure(smallest, batch) <= middle:
                break

    def distance(label: str) -> tuple[bool, float]:
        return not low <= measured[label] <= high, abs(math.log(measured[label] / middle))

    model, batch = choices[min(measured, key=distance)]
    return model, batch, measured


def compare(session: BenchSession, model: str, steps: tuple[int, int, int], options: Sequence[str] = (),
            gpu_sized: bool = False, stats_reps: int = 3, batch: int | None = None) -> dict[str, Any]:
    """One model's row: the pipeline (`python -m ffnbench.train` with the user's settings for this device, plus
    `options`) and the hand loop timed in alternating windows inside one run, their paired ratio, and what the FFN
    statistics cost a validation batch.

    Args:
        session: the device, and the work folder the run goes under.
        model: a model preset (conf/model/).
        steps: (warm-up steps, steps per window, windows).
        options: more overrides for the pipeline, e.g. ["trainer.compile_mode=reduce-overhead"]; the hand loop
            compiles as the resulting config says (trainer.compile, trainer.compile_mode).
        gpu_sized: whether this is the GPU-sized step (recorded in the row).
        stats_reps: repetitions of a validation batch with and without the FFN statistics (0: not timed).
        batch: the global batch (None: the user's).
    """
    warmup, window, windows = steps
    overrides = [*pipeline_overrides(session, model, batch), *options]
    run = alternate(session, overrides, warmup, window, windows)
    results, cfg = run.tokens_per_s(), run.cfg
    tps = int(cfg.data.batch_size) * int(cfg.model.seq_len)
    ratios = paired_ratios(results["pipeline"], results["hand"])
    hand, pipe, ratio = quartiles(results["hand"]), quartiles(results["pipeline"]), quartiles(ratios)
    row: dict[str, Any] = {
        "model": model, "gpu_sized": gpu_sized, "options": list(options),
        "batch_size": int(cfg.data.batch_size), "seq_len": int(cfg.model.seq_len), "tokens_per_step": tps,
        "warmup_steps": run.warmup, "window_steps": run.window, "windows": windows, "turn_steps": run.k,
        "hand_ms_per_step": quartiles([1e3 * tps / x for x in results["hand"]]),
        "hand_tokens_per_s": hand, "pipeline_tokens_per_s": pipe, "ratio": ratio,
        "ratio_iqr_share": ratio["iqr"] / ratio["median"],
        "pipeline_ms_per_step_extra": 1e3 * tps * (1 / pipe["median"] - 1 / hand["median"]),
        # The same training, step for step: the two losses at the last step (equal on a CPU).
        "final_train_loss": {"pipeline": run.result.metrics["final_train_loss"], "hand": run.loop.loss.item()},
        "raw": {"hand": results["hand"], "pipeline": results["pipeline"]},
        "goal": RATIO_GOAL, "meets_goal": ratio["median"] >= RATIO_GOAL,
    }
    if stats_reps:
        row.update(_stats_row(session, cfg, step_s=tps / pipe["median"], reps=stats_reps))
    return row


def _stats_trial(session: BenchSession, cfg, with_stats: bool, inner: int) -> Callable[[], float]:
    """Seconds per validation forward of one batch, with or without the FFN activation statistics, eager as a run
    validates (training.module.validation_step) even where the hand loop's model is compiled."""
    from ffnbench.model.ffn import ActivationStats

    loop = HandLoop(session, cfg)
    model = loop.model.eval()
    x, y = (t.to(session.device) for t in loop.batches(0))

    def forward() -> None:
        with torch.no_grad(), session.autocast(), torch.compiler.set_stance("force_eager"):
            model(x, y)

    def trial() -> float:
        for ffn in model.ffns:
            ffn.stats = ActivationStats(ffn.size.d_ff, session.device) if with_stats else None
        forward()  # warm-up
        seconds = time_call(forward, session.device, inner)
        for ffn in model.ffns:
            ffn.stats = None
        return seconds

    return trial


def _stats_row(session: BenchSession, cfg, step_s: float, reps: int) -> dict[str, Any]:
    """What the FFN statistics cost: a validation batch's time with them on and off (`reps` interleaved
    repetitions), and that extra time spread over the training steps (of `step_s` seconds) between two validations
    at the defaults."""
    from ffnbench.config.compose import compose

    defaults = compose([])  # what a run validates by default: how often, and on how many tokens
    val_every, val_tokens = int(defaults.trainer.val_every), int(defaults.data.val_tokens)
    stats = interleaved({"off": _stats_trial(session, cfg, False, 3), "on": _stats_trial(session, cfg, True, 3)},
                        reps)
    seq_len, batch = int(cfg.model.seq_len), int(cfg.data.batch_size)
    val_batches = math.ceil(max(1, val_tokens // seq_len) / batch)
    extra_s = val_batches * (quartiles(stats["on"])["median"] - quartiles(stats["off"])["median"])
    return {
        "val_stats_ratio": quartiles(paired_ratios(stats["off"], stats["on"])),  # throughput, on ÷ off
        "val_batch_ms": {"stats_off": quartiles([1e3 * t for t in stats["off"]]),
                         "stats_on": quartiles([1e3 * t for t in stats["on"]])},
        "stats_cost_of_training": extra_s / (val_every * step_s),
        "stats_cost_basis": f"{val_batches} validation batches (data.val_tokens={val_tokens}) every "
                            f"trainer.val_every={val_every} steps",
        "raw_stats": {"stats_off_s": stats["off"], "stats_on_s": stats["on"]},
    }
