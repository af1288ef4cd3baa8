"""Benchmark 1, pipeline overhead: tokens/s of `train()` ÷ tokens/s of the hand loop over the same model and
batches, timed side by side inside one run (contenders.Alternation), at a step the size of a small model's step on
a GPU (a few milliseconds, where the pipeline's fixed cost per step decides throughput) and at tiny and small; where
the pipeline's per-step time goes (a profile against the hand loop's); and what the FFN activation statistics
(gathered in validation only) cost.

`compare` is one model's row for any trainer options: `make gpu-check` times trainer.compile_mode=reduce-overhead
with it."""

from __future__ import annotations

import cProfile
import math
import pstats
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ffnbench.bench.contenders import (
    HandLoop,
    _quiet,
    alternate,
    data_batches,
    pipeline_overrides,
    run_train,
    whole_batches,
)
from ffnbench.bench.session import GOALS, BenchSession
from ffnbench.bench.timing import interleaved, load_snapshot, paired_ratios, quartiles, time_call
from ffnbench.throughput import sync

# The hand-loop step a "GPU-sized" model takes: what tiny and small take on a GPU. The benchmark measures the model
# presets' hand-loop steps on this machine and picks the one nearest the middle of this range (geometrically).
GPU_SIZED_MS = (2.0, 10.0)

# The profile of the pipeline before the per-step work was cut (issue 13): commit 8dc111f on the machine of
# experiments/bench/cpu-2core-epyc (busy at the time: read the times as shares), micro, cProfile over 200 steps,
# measured as `profile` measures. Cumulative times are per step under the profiler.
PROFILE_BEFORE = (
    "profile before (commit 8dc111f, micro, cProfile over 200 steps, as measured here): the pipeline made 5003 "
    "Python calls a step, the hand loop 1396; the calls beyond the hand loop's took 7.55 ms of own time a step under "
    "the profiler. Cumulatively a step spent 3.7 ms in LightningModule.log (6 calls a logging step, each "
    "deep-copying its metric's state), 1.7 ms in the rich progress bar's per-step update (besides its redraws, up "
    "to 100 a second from a thread), 1.2 ms in Lightning's logger connector walking the logged metrics after every "
    "step (with a .item() of the progress bar's loss), 1.7 ms in 46 nn.Module.__setattr__ of _current_fx_name, "
    "1.5 ms in clip_grad_norm_ walking named_modules for the parameters, and 84 profiler context managers a step; "
    "the DataLoader added its record_function and collation to each batch")


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


def choose_gpu_sized(session: BenchSession) -> tuple[str, int | None, dict[str, float]]:
    """The GPU-sized step: the model preset, and batch, whose hand-loop step here is nearest the middle of
    GPU_SIZED_MS (log scale), preferring one inside the range. The presets are tried smallest first at the user's
    batch, and the search stops at the first above the range; when even the smallest is above it (a slow machine),
    its batch is halved until its step is below the middle. Returns the model, the batch (None: the user's) and the
    step times measured, by 'model (batch b)'."""
    low, high = GPU_SIZED_MS
    middle = math.sqrt(low * high)
    measured: dict[str, float] = {}
    choices: dict[str, tuple[str, int | None]] = {}

    def measure(model: str, batch: int | None) -> float:
        label = f"{model} (batch {batch})" if batch else model
        measured[label], choices[label] = hand_step_ms(session, model, batch), (model, batch)
        return measured[label]

    for model in session.sizes.overhead_gpu_sized:
        if measure(model, None) > high:
            break
    smallest = session.sizes.overhead_gpu_sized[0]
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


def compare(session: BenchSession, model: str, options: Sequence[str] = (), gpu_sized: bool = False,
            stats: bool = True, batch: int | None = None) -> dict[str, Any]:
    """One model's row: the pipeline (`python -m ffnbench.train` with the user's settings for this device, plus
    `options`) and the hand loop timed in alternating windows inside one run, their paired ratio, and (with `stats`)
    what the FFN statistics cost a validation batch.

    Args:
        session: the device and sizes (sizes.overhead_steps[model]: warm-up steps, steps per window, windows).
        model: a model preset (conf/model/).
        options: more overrides for the pipeline, e.g. ["trainer.compile_mode=reduce-overhead"]; the hand loop
            compiles as the resulting config says (trainer.compile, trainer.compile_mode).
        gpu_sized: whether this is the GPU-sized step (recorded in the row).
        stats: also time a validation batch with and without the FFN statistics.
        batch: the global batch (None: sizes.overhead_batch's for this model, else the user's).
    """
    s = session.sizes
    warmup, window, windows = s.overhead_steps[model]
    overrides = [*pipeline_overrides(session, model, batch or s.overhead_batch.get(model)), *options]
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
        "goal": GOALS["overhead_ratio"], "meets_goal": ratio["median"] >= GOALS["overhead_ratio"],
    }
    if stats:
        row.update(_stats_row(session, cfg, step_s=tps / pipe["median"]))
    return row


def _stats_row(session: BenchSession, cfg, step_s: float) -> dict[str, Any]:
    """What the FFN statistics cost: a validation batch's time with them on and off, and that extra time spread
    over the training steps (of `step_s` seconds) between two validations at the defaults."""
    from ffnbench.config.compose import compose

    defaults = compose([])  # what a run validates by default: how often, and on how many tokens
    val_every, val_tokens = int(defaults.trainer.val_every), int(defaults.data.val_tokens)
    stats = interleaved({"off": _stats_trial(session, cfg, False, 3), "on": _stats_trial(session, cfg, True, 3)},
                        max(3, session.sizes.overhead_reps))
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


def _function_name(key: tuple[str, int, str]) -> str:
    """'lightning/pytorch/trainer/call.py:203 _call_callback_hooks': a profiled function, its path from the package
    root (site-packages, the standard library, this repository)."""
    file, line, name = key
    if file == "~":
        return name
    short = re.sub(r"^.*/(site-packages|lib/python3\.\d+)/", "", file)
    if short == file and "/ffnbench/" in file:
        short = "ffnbench/" + file.rsplit("/ffnbench/", 1)[1]
    return f"{short}:{line} {name}"


def _stats_by_function(profile: cProfile.Profile, steps: int) -> tuple[dict[str, tuple[float, float]], float]:
    """{function: (calls per step, own ms per step)} and the calls per step in all."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out: dict[str, tuple[float, float]] = {}
    for key, (_, calls, own, _, _) in stats.items():
        name = _function_name(key)
        c, t = out.get(name, (0.0, 0.0))
        out[name] = (c + calls / steps, t + 1e3 * own / steps)
    return out, sum(c for c, _ in out.values())


def profile(session: BenchSession, model: str, steps: int, top: int = 12,
            batch: int | None = None) -> dict[str, Any]:
    """Where the pipeline's time per step goes beyond the hand loop's: cProfile over `steps` steps of each (after
    warm-up): Python calls per step of each, and the functions with the most own time in the calls the pipeline
    makes beyond the hand loop's (a function both make as often, a kernel say, is shared work: its time differs by
    noise alone). The profiler adds about the same time to every Python call, so read the times as shares of the
    overhead, not as durations; the call counts are exact."""
    import lightning as L

    from ffnbench.config.compose import compose

    overrides = pipeline_overrides(session, model, batch)  # batch: the GPU-sized row's (None: the user's)
    _, warmup, steps = whole_batches(overrides, max(5, steps // 10), steps)  # profiled from a batch's end to one
    cfg = compose([*overrides, f"trainer.max_steps={warmup + steps}", f"run_dir={session.work / 'profile'}"])

    class Window(L.Callback):
        def __init__(self) -> None:
            self.profile = cProfile.Profile()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step == warmup:
                self.profile.enable()
            elif trainer.global_step == warmup + steps:
                self.profile.disable()

    window = Window()
    with _quiet():
        run_train(cfg, [window])
    loop = HandLoop(session, cfg, batches=data_batches(cfg, int(cfg.model.seq_len), pin=session.gpu),
                    compile=bool(cfg.trainer.compile), compile_mode=str(cfg.trainer.compile_mode))
    for _ in range(warmup):
        loop.step()
    hand_profile = cProfile.Profile()
    hand_profile.enable()
    for _ in range(steps):
        loop.step()
    hand_profile.disable()
    pipe, pipe_calls = _stats_by_function(window.profile, steps)
    hand, hand_calls = _stats_by_function(hand_profile, steps)
    beyond = {name: (calls - hand.get(name, (0.0, 0.0))[0], own * (1 - hand.get(name, (0.0, 0.0))[0] / calls))
              for name, (calls, own) in pipe.items() if calls > hand.get(name, (0.0, 0.0))[0]}
    ranked = sorted(beyond, key=lambda name: beyond[name][1], reverse=True)
    return {
        "model": model, "batch_size": int(cfg.data.batch_size), "steps": steps,
        "pipeline_calls_per_step": pipe_calls, "hand_calls_per_step": hand_calls,
        "beyond_hand_own_ms_per_step": sum(own for _, own in beyond.values()),
        "top_beyond_hand": [{"function": name, "calls_per_step": beyond[name][0], "own_ms_per_step": beyond[name][1]}
                            for name in ranked[:top]],
    }


def lightning_floor(session: BenchSession, steps: int, reps: int = 3) -> dict[str, Any]:
    """What Lightning's training loop itself costs a step here: a one-parameter model trained by a Trainer set up as
    train() sets it up (NoProfiler, no logger, checkpointing, progress bar or extra callback) and by the same hand
    loop (AdamW, its schedule, clipping), `steps` steps each, `reps` times interleaved. The difference is the part
    of the pipeline's overhead that no change on this side of Lightning's API removes.

    Returns ms per step of each (the median over all steps and the 5th percentile, which a busy machine disturbs
    least) and the differences."""
    import lightning as L

    from ffnbench.callbacks import NoProfiler

    device = session.device
    x = torch.ones(4, 1, device=device)

    def optimizer_for(net: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        optimizer = torch.optim.AdamW(net.parameters(), fused=True)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    class Trivial(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(1, 1)
            self.params = list(self.net.parameters())

        def __setattr__(self, name: str, value: Any) -> None:  # as cheap as LMModule's
            if name == "_current_fx_name":
                object.__setattr__(self, name, value)
            else:
                super().__setattr__(name, value)

        def training_step(self, batch, batch_idx):
            return self.net(batch).sum()

        def on_before_optimizer_step(self, optimizer) -> None:
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)

        def configure_optimizers(self):
            optimizer, scheduler = optimizer_for(self.net)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            sync(device)
            self.times.append(time.perf_counter())

    def batches():
        while True:
            yield x

    def lightning() -> list[float]:
        clock = Clock()
        trainer = L.Trainer(accelerator="gpu" if session.gpu else "cpu", devices=1, max_steps=steps, max_epochs=-1,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[clock], profiler=NoProfiler(),
                            num_sanity_val_steps=0)
        with _quiet():
            trainer.fit(Trivial(), train_dataloaders=batches())
        return [1e3 * (b - a) for a, b in zip(clock.times[steps // 10:], clock.times[steps // 10 + 1:])]

    def hand() -> list[float]:
        model = torch.nn.Linear(1, 1).to(device)
        params, (optimizer, scheduler) = list(model.parameters()), optimizer_for(model)
        times = []
        for _ in range(steps):
            model(x).sum().backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            sync(device)
            times.append(time.perf_counter())
        return [1e3 * (b - a) for a, b in zip(times[steps // 10:], times[steps // 10 + 1:])]

    ms: dict[str, list[float]] = {"hand": [], "lightning": []}
    for rep in range(reps):  # interleaved, the order reversed every other round (timing.interleaved)
        for name in ("hand", "lightning") if rep % 2 == 0 else ("lightning", "hand"):
            ms[name] += hand() if name == "hand" else lightning()
    figures = {name: {"median": float(np.median(v)), "p5": float(np.percentile(v, 5)), "n": len(v)}
               for name, v in ms.items()}
    return {**figures, "steps": steps, "reps": reps,
            "extra_ms_per_step": {k: figures["lightning"][k] - figures["hand"][k] for k in ("median", "p5")}}


def _notes(session: BenchSession, rows: list[dict], measured: dict[str, float], prof: dict | None,
           floor: dict | None) -> list[str]:
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
        notes.append(PROFILE_BEFORE)
    if floor:
        gpu_row = next(r for r in rows if r["gpu_sized"])
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


def measure(session: BenchSession) -> dict[str, Any]:
    """The overhead record: settings, load, the GPU-sized row then one per model of `sizes.overhead_models`, the
    profile, notes."""
    s = session.sizes
    load = {"before": load_snapshot()}
    chosen, batch, measured = choose_gpu_sized(session)
    rows = [compare(session, chosen, gpu_sized=True, batch=batch)]
    rows += [compare(session, model) for model in s.overhead_models if (model, None) != (chosen, batch)]
    models = [r["model"] for r in rows]
    prof = profile(session, chosen, s.overhead_profile_steps, batch=batch) if s.overhead_profile_steps else None
    floor = lightning_floor(session, s.overhead_floor_steps) if s.overhead_floor_steps else None
    load["after"] = load_snapshot()
    settings = {"overrides": [pipeline_overrides(session, r["model"], r["batch_size"]) for r in rows],
                "steps": {m: s.overhead_steps[m] for m in models}, "gpu_sized_ms": list(GPU_SIZED_MS),
                "gpu_sized_candidates_ms": measured, "device": str(session.device), "compile": session.gpu,
                "precision": session.precision,
                "hand_loop": "GPT + module.build_optimizer (same AdamW, schedule) + clip_grad_norm_ + the same "
                             "data windows and compilation; loss.item() once per log_every steps",
                "excluded": "validation and checkpoints (outside the timed windows), process and Trainer start-up"}
    return {"settings": settings, "load": load, "rows": rows, "profile": prof, "lightning_floor": floor,
            "notes": _notes(session, rows, measured, prof, floor)}

