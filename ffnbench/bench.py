"""Performance benchmarks (`make bench`), each printing a table and writing JSON to <out>/<label>/:

    python -m ffnbench.bench [--only 1,3] [--quick] [--label NAME] [--out DIR] [--device cpu|cuda|auto]

  1 overhead   tokens/s of the real pipeline (train(): Lightning, logging, callbacks) ÷ tokens/s of a minimal
               hand-written PyTorch loop over the same model, batches, AdamW and clipping     → overhead.json
  2 mfu        achieved model FLOP/s ÷ peak FLOP/s (CPU: the fp32 GEMM probe of throughput.py, measured here;
               GPU: the datasheet bf16 peak), tiny and small models                              → mfu.json
  3 variants   every FFN variant at matched budget: one FFN layer forward+backward, and a whole training
               step, eager and compiled                                                          → variants.json
  4 alignment  one SwiGLU layer at d_ff = 682 / 704 / 768 (multiple of 1 / 64 / 256): time and time per
               parameter (claim C9)                                                              → alignment.json
  5 startup    command start → first training step of `python -m ffnbench.train` (a subprocess), and data
               preparation: first tokenization vs cached load                                    → startup.json

Method: warm-up steps and calls are excluded; repetitions are interleaved (A B, B A, A B, ...) so slow drift of
the machine hits every contender alike; every figure is the median of its repetitions with the interquartile
range (IQR) and the count; ratios are taken per repetition between measurements made side by side. On a GPU
timed regions are bracketed by torch.cuda.synchronize(), models run under bf16 autocast and compiled."""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import logging
import math
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ffnbench.cli import user_errors_exit
from ffnbench.errors import ConfigError
from ffnbench.throughput import sync

BENCHMARKS = {1: "overhead", 2: "mfu", 3: "variants", 4: "alignment", 5: "startup"}
DEFAULT_OUT = Path("experiments") / "bench"
GOALS = {"overhead_ratio": 0.95, "cpu_mfu_tiny": 0.7, "startup_s": 10.0, "cached_load_s": 1.0}


# ---------------------------------------------------------------------------------------------------------
# Statistics and timing
# ---------------------------------------------------------------------------------------------------------


def summarize(values: Sequence[float]) -> dict[str, float | int]:
    """Median, quartiles, IQR, min, max and count of a list of measurements (linear-interpolated quartiles)."""
    xs = np.asarray([float(v) for v in values], dtype=float)
    if xs.size == 0:
        raise ValueError("summarize: no measurements")
    q1, median, q3 = (float(q) for q in np.percentile(xs, [25, 50, 75]))
    return {"median": median, "iqr": q3 - q1, "q1": q1, "q3": q3, "min": float(xs.min()), "max": float(xs.max()),
            "n": int(xs.size)}


def interleaved(trials: Mapping[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Call every trial `reps` times, round-robin, reversing the order every other round (A B, B A, A B, ...), so
    that drift of the machine (clock, other load, caches) hits every trial alike. Each call returns one
    measurement; the lists come back in the order they were taken."""
    names = list(trials)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(float(trials[name]()))
    return out


def paired_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """num[i] / den[i]: the ratio of two measurements taken side by side in repetition i."""
    if len(num) != len(den):
        raise ValueError("paired_ratios: the two lists differ in length")
    return [a / b for a, b in zip(num, den)]


def time_call(fn: Callable[[], Any], device: torch.device, inner: int = 1) -> float:
    """Seconds per call of `fn`, over `inner` back-to-back calls, the device synchronized at both edges."""
    sync(device)
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    sync(device)
    return (time.perf_counter() - start) / inner


def cpu_ticks() -> tuple[int, int] | None:
    """(all, idle) CPU time of the whole machine so far, in clock ticks (/proc/stat; None where unavailable)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields), idle


def cpu_busy_fraction(interval: float = 0.5) -> float | None:
    """Share of all CPU time that was busy over `interval` seconds (None where unavailable).
    Taken while the benchmark itself is idle, it says how much else is running."""
    a = cpu_ticks()
    time.sleep(interval)
    b = cpu_ticks()
    if a is None or b is None or b[0] == a[0]:
        return None
    return 1.0 - (b[1] - a[1]) / (b[0] - a[0])


def load_snapshot() -> dict[str, Any]:
    try:
        loadavg = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        loadavg = None
    busy = cpu_busy_fraction()
    return {"loadavg": loadavg, "busy_fraction": None if busy is None else round(busy, 3)}


class LoadMeter:
    """How busy the rest of the machine was while a benchmark ran: all CPU time used (/proc/stat) minus this
    process's own (and its finished subprocesses'), as a share of the machine's capacity over the wall time."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        ticks = cpu_ticks()
        if ticks is None:
            return None
        busy = (ticks[0] - ticks[1]) / os.sysconf("SC_CLK_TCK")
        t = os.times()
        return time.perf_counter(), busy, t.user + t.system + t.children_user + t.children_system

    def read(self) -> dict[str, float] | None:
        end = self._read()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        wall = end[0] - self.start[0]
        others = max(0.0, (end[1] - self.start[1]) - (end[2] - self.start[2]))
        return {"wall_s": round(wall, 1), "others_cpu_s": round(others, 1),
                "others_busy_fraction": round(others / (wall * (os.cpu_count() or 1)), 4)}


# ---------------------------------------------------------------------------------------------------------
# Context: where, on what, how big
# ---------------------------------------------------------------------------------------------------------


def machine_info(label: str, device: torch.device) -> dict[str, Any]:
    from ffnbench.records import cpu_model, versions

    gpu = device.type == "cuda"
    return {
        "label": label,
        "hostname": platform.node(),
        "accelerator": "gpu" if gpu else "cpu",
        "gpu": torch.cuda.get_device_name(device) if gpu else None,
        "gpu_count": torch.cuda.device_count() if gpu else 0,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if gpu else None,
        "python": platform.python_version(),
        "versions": versions(),
    }


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does. `full` is what `make bench` runs; `quick` is for the tests."""

    overhead_models: tuple[str, ...]
    overhead_steps: dict[str, tuple[int, int]]  # model -> (warm-up steps, timed steps) per repetition
    overhead_reps: int
    mfu_models: tuple[tuple[str, int], ...]  # (model, global batch)
    mfu_steps: dict[str, tuple[int, int]]
    mfu_reps: int
    variant_model: str
    variant_batch: int
    variants: tuple[str, ...] | None  # None: every variant of the registry
    variant_compile: bool | tuple[str, ...]  # True: every variant compiled too; a tuple: only those
    variant_layer_inner: int
    variant_step_inner: int
    variant_reps: int
    align_d_model: int
    align_tokens: int
    align_inner: int
    align_reps: int
    startup_model: str
    startup_reps: int
    data_reps: int
    val_tokens: int  # the pipeline's validation set: outside every timed window, kept small to save time


def sizes_for(quick: bool, gpu: bool) -> Sizes:
    if quick:
        return Sizes(
            overhead_models=("micro",), overhead_steps={"micro": (2, 4)}, overhead_reps=2,
            mfu_models=(("micro", 8),), mfu_steps={"micro": (2, 3)}, mfu_reps=2,
            variant_model="micro", variant_batch=4, variants=("gelu", "swiglu"), variant_compile=("gelu",),
            variant_layer_inner=2, variant_step_inner=1, variant_reps=2,
            align_d_model=64, align_tokens=64, align_inner=2, align_reps=3,
            startup_model="micro", startup_reps=1, data_reps=1, val_tokens=256,
        )
    if gpu:
        return Sizes(
            overhead_models=("tiny", "small"), overhead_steps={"tiny": (15, 100), "small": (10, 50)}, overhead_reps=5,
            mfu_models=(("tiny", 32), ("small", 32)), mfu_steps={"tiny": (15, 100), "small": (10, 50)}, mfu_reps=5,
            variant_model="small", variant_batch=32, variants=None, variant_compile=True,
            variant_layer_inner=50, variant_step_inner=10, variant_reps=7,
            align_d_model=256, align_tokens=65536, align_inner=50, align_reps=15,
            startup_model="tiny", startup_reps=3, data_reps=3, val_tokens=4096,
        )
    return Sizes(
        overhead_models=("tiny", "micro"), overhead_steps={"tiny": (4, 16), "micro": (20, 200)}, overhead_reps=6,
        mfu_models=(("tiny", 32), ("small", 4)), mfu_steps={"tiny": (4, 16), "small": (3, 6)}, mfu_reps=3,
        variant_model="tiny", variant_batch=32, variants=None, variant_compile=True,
        variant_layer_inner=4, variant_step_inner=2, variant_reps=5,
        align_d_model=256, align_tokens=2048, align_inner=4, align_reps=9,
        startup_model="tiny", startup_reps=3, data_reps=3, val_tokens=4096,
    )


@dataclass
class Context:
    label: str
    out: Path
    device: torch.device
    quick: bool
    command: str
    work: Path  # scratch space for run directories and caches, deleted at the end
    cache_dir: Path  # the token cache the pipeline and the reference loop read (the user's data.cache_dir)
    sizes: Sizes
    machine: dict[str, Any] = field(default_factory=dict)
    meter: LoadMeter | None = None  # started by main() before each benchmark

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def trainer_overrides(self) -> list[str]:
        """The trainer a user gets on this device: trainer=gpu (bf16-mixed, compiled blocks) or the CPU (fp32)."""
        return ["trainer=gpu"] if self.gpu else ["trainer.accelerator=cpu"]

    def record(self, name: str, settings: dict, rows: list[dict], load: dict, **extra: Any) -> dict:
        from ffnbench.records import write_json_atomic

        data = {
            "benchmark": name,
            "machine": self.machine,
            "command": self.command,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": self.quick,
            "settings": settings,
            "load": {**load, "during": self.meter.read() if self.meter else None},
            "rows": rows,
            **extra,
        }
        path = self.out / f"{name}.json"
        write_json_atomic(path, data)
        return data


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return "—"
    if isinstance(x, int | float) and not isinstance(x, bool):
        return format(x, spec)
    return str(x)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (markdown pipes), columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
              for r in cells[1:]]
    return "\n".join(lines)


def med_iqr(s: Mapping[str, Any], spec: str = ".4g") -> str:
    return f"{_fmt(s['median'], spec)} ± {_fmt(s['iqr'] / 2, '.2g')}"


def _print_block(title: str, table: str, notes: Sequence[str] = ()) -> None:
    print(f"\n## {title}\n\n{table}")
    for note in notes:
        print(f"  {note}")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------------------
# The two contenders: the real pipeline and a minimal hand-written loop
# ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Swallow what train() and Lightning print (shown if the run fails)."""
    buffer = io.StringIO()
    names = ("lightning.pytorch", "lightning.fabric", "lightning")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield buffer
    except BaseException:
        sys.stderr.write(buffer.getvalue()[-4000:])
        raise
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def pipeline_overrides(ctx: Context, model: str, batch_size: int | None = None) -> list[str]:
    """The user's command for this model on this device (progress bar on), with the CSV logger only, plus what keeps
    a benchmark run short: a small fixed validation set, and validation and checkpoints only outside the timed window
    (at step 0 and at the end). Not wandb: its threads outlive the run (an asyncio loop, telemetry exporters) and
    would perturb every later measurement in this process; its start-up is measured by the startup benchmark."""
    return [
        f"model={model}",
        *ctx.trainer_overrides(),
        "logger=csv",
        "trainer.val_every=1000000",
        "trainer.ckpt_every=1000000",
        f"data.val_tokens={ctx.sizes.val_tokens}",
        f"data.cache_dir={ctx.cache_dir}",
        *([f"data.batch_size={batch_size}"] if batch_size else []),
    ]


def _step_clock(device: torch.device, first: int, last: int):
    import lightning as L

    class StepClock(L.Callback):
        """perf_counter at the end of optimizer steps `first` and `last` (device synchronized there only)."""

        def __init__(self) -> None:
            self.times: dict[int, float] = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step in (first, last):
                sync(device)
                self.times[trainer.global_step] = time.perf_counter()

        def tokens_per_s(self, tokens_per_step: int) -> float:
            if set(self.times) != {first, last}:
                raise RuntimeError(f"benchmark run: steps {first} and {last} were not both timed ({self.times})")
            return (last - first) * tokens_per_step / (self.times[last] - self.times[first])

    return StepClock()


_RUN_NUMBERS = itertools.count()


class Pipeline:
    """One repetition = one `ffnbench.train.train(cfg)` call, exactly as a user's run (same Trainer, module,
    callbacks, loggers, data module), timed from the end of step `warmup` to the end of step `warmup + steps`."""

    def __init__(self, ctx: Context, overrides: list[str], warmup: int, steps: int):
        from ffnbench.config import compose

        self.ctx, self.overrides, self.warmup, self.steps = ctx, overrides, warmup, steps
        self.cfg = compose([*overrides, f"trainer.max_steps={warmup + steps}", f"run_dir={ctx.work / 'unused'}"])
        self.batch_size, self.seq_len = int(self.cfg.data.batch_size), int(self.cfg.model.seq_len)
        self.tokens_per_step = self.batch_size * self.seq_len
        self.monitor_readings: list[float] = []  # what the run's own ThroughputMonitor said
        self.last_result: dict | None = None

    def __call__(self) -> float:
        from ffnbench.config import compose
        from ffnbench.train import train

        run_dir = self.ctx.work / "runs" / f"pipeline-{next(_RUN_NUMBERS)}"  # always a fresh run, never a resume
        cfg = compose([*self.overrides, f"trainer.max_steps={self.warmup + self.steps}", f"run_dir={run_dir}"])
        clock = _step_clock(self.ctx.device, self.warmup, self.warmup + self.steps)
        with _quiet():
            result = train(cfg, callbacks=[clock])
        if result["status"] != "finished" or result.get("resumed_from_step") is not None:
            raise RuntimeError(f"benchmark run {run_dir} ended {result['status']}: {result.get('error')}")
        self.last_result = result
        if result["throughput"] and result["throughput"].get("tokens_per_s"):
            self.monitor_readings.append(result["throughput"]["tokens_per_s"])
        return clock.tokens_per_s(self.tokens_per_step)


class HandLoop:
    """The minimal PyTorch training loop the pipeline is measured against: the same GPT, the same batches (the
    data module's windows), the same AdamW and schedule (module.build_optimizer), the same gradient clipping,
    bf16 autocast and compiled blocks on a GPU as the pipeline has there, and the loss read once per logging
    window, as any loop that prints its loss does. Nothing else: no hooks, no logging, no checkpoints."""

    def __init__(self, ctx: Context, cfg, mcfg=None, batches: Callable[[int], tuple] | None = None,
                 compile: bool | None = None):
        from ffnbench.config import model_config
        from ffnbench.model import GPT
        from ffnbench.module import build_optimizer
        from ffnbench.tokenizer import vocab_size_for

        self.ctx, self.device = ctx, ctx.device
        self.mcfg = mcfg or model_config(cfg, vocab_size_for(cfg.data))
        self.optim = dict(cfg.optim)
        self.log_every = int(cfg.trainer.log_every)
        self.total_steps = int(cfg.trainer.max_steps or 1000)
        self.model = GPT(self.mcfg, seed=int(cfg.seed)).to(self.device)
        if ctx.gpu if compile is None else compile:
            for block in self.model.blocks:
                block.compile()
        self.optimizer, self.scheduler = build_optimizer(self.model, self.optim, self.total_steps, self.device)
        self.batches = batches or data_batches(cfg, self.mcfg.seq_len, pin=ctx.gpu)
        self.tokens_per_step = int(cfg.data.batch_size) * self.mcfg.seq_len
        self.i = 0
        self.loss: torch.Tensor | None = None

    def step(self) -> None:
        x, y = self.batches(self.i)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        with self.ctx.autocast():
            loss = self.model(x, y)
        loss.backward()
        clip = self.optim.get("grad_clip")
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip else math.inf)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = loss.detach()
        if (self.i + 1) % self.log_every == 0:  # as often as the pipeline reads it
            loss.item()
        self.i += 1

    def run(self, warmup: int, steps: int) -> float:
        """Tokens/s over `steps` steps after `warmup` steps."""
        for _ in range(warmup):
            self.step()
        seconds = time_call(self.step, self.device, inner=steps)
        return self.tokens_per_step / seconds


def data_batches(cfg, seq_len: int, pin: bool = False) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """Training batch i of this config: the same windows the pipeline's data module serves (page-locked for a GPU,
    as the data module's loader pins them there)."""
    from ffnbench.data import LMDataModule, TokenWindows, TrainBatches

    dm = LMDataModule(cfg.data, seq_len=seq_len, seed=int(cfg.seed))
    dm.prepare_data()
    dm.setup("fit")
    stream = TrainBatches(TokenWindows(dm.train_tokens, seq_len), int(cfg.seed), int(cfg.data.batch_size))
    def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = stream.batch(i)
        return (x.pin_memory(), y.pin_memory()) if pin else (x, y)

    return batch


def _hand_trial(ctx: Context, cfg, warmup: int, steps: int) -> Callable[[], float]:
    """A fresh loop per repetition (like a fresh run), warm-up steps excluded."""
    batches = data_batches(cfg, int(cfg.model.seq_len), pin=ctx.gpu)

    def trial() -> float:
        loop = HandLoop(ctx, cfg, batches=batches)
        return loop.run(warmup, steps)

    return trial


# ---------------------------------------------------------------------------------------------------------
# 1. Pipeline overhead
# ---------------------------------------------------------------------------------------------------------


def _stats_trial(ctx: Context, cfg, with_stats: bool, inner: int) -> Callable[[], float]:
    """Seconds per validation forward of one batch, with or without the FFN activation statistics."""
    from ffnbench.ffn import ActivationStats

    loop = HandLoop(ctx, cfg)
    model = loop.model.eval()
    x, y = (t.to(ctx.device) for t in loop.batches(0))

    def forward() -> None:
        with torch.no_grad(), ctx.autocast():
            model(x, y)

    def trial() -> float:
        for ffn in model.ffns:
            ffn.stats = ActivationStats(ffn.size.d_ff, ctx.device) if with_stats else None
        forward()  # warm-up (and the first compile)
        seconds = time_call(forward, ctx.device, inner)
        for ffn in model.ffns:
            ffn.stats = None
        return seconds

    return trial


def bench_overhead(ctx: Context) -> dict:
    from ffnbench.config import compose

    s = ctx.sizes
    defaults = compose([])  # what a run validates by default: how often, and on how many tokens
    val_every, val_tokens = int(defaults.trainer.val_every), int(defaults.data.val_tokens)
    rows, notes = [], []
    load = {"before": load_snapshot()}
    for model in s.overhead_models:
        warmup, steps = s.overhead_steps[model]
        pipeline = Pipeline(ctx, pipeline_overrides(ctx, model), warmup, steps)
        cfg = pipeline.cfg
        results = interleaved({"hand": _hand_trial(ctx, cfg, warmup, steps), "pipeline": pipeline},
                              s.overhead_reps)
        ratios = paired_ratios(results["pipeline"], results["hand"])
        # FFN statistics: gathered in validation only. Cost of a validation batch with them ÷ without, and that
        # extra cost spread over the training steps between two validations at the default settings.
        stats = interleaved({"off": _stats_trial(ctx, cfg, False, 3), "on": _stats_trial(ctx, cfg, True, 3)},
                            max(3, s.overhead_reps))
        tps = pipeline.tokens_per_step
        hand_s, pipe_s, ratio_s = summarize(results["hand"]), summarize(results["pipeline"]), summarize(ratios)
        step_s = tps / pipe_s["median"]
        val_batches = math.ceil(max(1, val_tokens // pipeline.seq_len) / pipeline.batch_size)
        extra_s = val_batches * (summarize(stats["on"])["median"] - summarize(stats["off"])["median"])
        goal = ctx.quick or model != "micro"  # micro: a probe of the per-step cost, not a model anyone trains
        row = {
            "model": model, "batch_size": pipeline.batch_size, "seq_len": pipeline.seq_len, "tokens_per_step": tps,
            "warmup_steps": warmup, "timed_steps": steps,
            "hand_tokens_per_s": hand_s,
            "pipeline_tokens_per_s": pipe_s,
            "ratio": ratio_s,
            "pipeline_ms_per_step_extra": 1e3 * tps * (1 / pipe_s["median"] - 1 / hand_s["median"]),
            "pipeline_monitor_tokens_per_s": summarize(pipeline.monitor_readings) if pipeline.monitor_readings
            else None,
            "val_stats_ratio": summarize(paired_ratios(stats["off"], stats["on"])),  # throughput, on ÷ off
            "val_batch_ms": {"stats_off": summarize([1e3 * t for t in stats["off"]]),
                             "stats_on": summarize([1e3 * t for t in stats["on"]])},
            "stats_cost_of_training": extra_s / (val_every * step_s),
            "stats_cost_basis": f"{val_batches} validation batches (data.val_tokens={val_tokens}) every "
                                f"trainer.val_every={val_every} steps",
            "raw": {"hand": results["hand"], "pipeline": results["pipeline"], "stats_off_s": stats["off"],
                    "stats_on_s": stats["on"]},
            "goal": GOALS["overhead_ratio"] if goal else None,
            "meets_goal": ratio_s["median"] >= GOALS["overhead_ratio"] if goal else None,
        }
        rows.append(row)
    load["after"] = load_snapshot()
    headers = ["model", "tokens/step", "hand loop tok/s", "pipeline tok/s", "pipeline ÷ hand", "extra ms/step",
               "goal", "val batch, FFN stats on ÷ off", "FFN stats cost of training"]
    table = format_table(headers, [
        [r["model"], r["tokens_per_step"], med_iqr(r["hand_tokens_per_s"], ".0f"),
         med_iqr(r["pipeline_tokens_per_s"], ".0f"), med_iqr(r["ratio"], ".3f"),
         f"{r['pipeline_ms_per_step_extra']:+.2f}",
         (f"≥ {r['goal']} {'met' if r['meets_goal'] else 'NOT met'}" if r["goal"] else "(none)"),
         med_iqr(r["val_stats_ratio"], ".3f"), f"{r['stats_cost_of_training']:.2%}"]
        for r in rows])
    notes.append(f"median ± IQR/2 over {s.overhead_reps} interleaved repetitions (steps per repetition: "
                 + ", ".join(f"{m} {w} warm-up + {n} timed" for m, (w, n) in s.overhead_steps.items()) + "); "
                 "ratio = pipeline ÷ hand loop per repetition; extra ms/step = the pipeline's time per step minus "
                 "the hand loop's (medians)")
    notes.append("pipeline = ffnbench.train.train() as `python -m ffnbench.train` runs it: Lightning Trainer, LMModule "
                 "logging, ThroughputMonitor, PeriodicCheckpoint, progress bar, CSV logger (wandb: see startup); "
                 "validation and checkpoints fall "
                 "outside the timed steps. hand loop = the same GPT, batches, AdamW, schedule, clipping; nothing else")
    notes.append("FFN statistics are gathered during validation only (a training step never computes them): a "
                 "validation batch's throughput with them on ÷ off, and their extra time as a share of training time "
                 f"at the defaults (validation on {val_tokens} tokens every {val_every} steps)")
    if "micro" in s.overhead_models and not ctx.quick:
        notes.append("micro (d=32, 2 layers) is there to expose the per-step cost of the pipeline's Python: its steps "
                     "take a few milliseconds, so the goal is not applied to it")
    _print_block("1. Pipeline overhead", table, notes)
    settings = {"overrides": {m: pipeline_overrides(ctx, m) for m in s.overhead_models}, "steps": s.overhead_steps,
                "reps": s.overhead_reps, "device": str(ctx.device), "compile": ctx.gpu,
                "precision": "bf16-mixed" if ctx.gpu else "32-true",
                "hand_loop": "GPT + module.build_optimizer (same AdamW, schedule) + clip_grad_norm_ + the same "
                             "data windows; loss.item() once per log_every steps",
                "excluded": "validation and checkpoints (outside the timed window), process and Trainer start-up"}
    return ctx.record("overhead", settings, rows, load, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# 2. MFU
# ---------------------------------------------------------------------------------------------------------


def peak_for(ctx: Context) -> tuple[float | None, str]:
    """The denominator of MFU on this device (CPU: see bench_mfu, which measures it alongside)."""
    from ffnbench.throughput import gpu_peak_flops

    name = torch.cuda.get_device_name(ctx.device)
    peak = gpu_peak_flops(name, "bf16-mixed")
    return peak, (f"datasheet bf16 dense peak of {name} (throughput.GPU_PEAK_FLOPS)" if peak
                  else f"unknown GPU {name!r}: not in throughput.GPU_PEAK_FLOPS")


def bench_mfu(ctx: Context) -> dict:
    """MFU of the pipeline and of the hand loop. On a CPU the peak is throughput.py's probe (the best of timed
    1024×1024 fp32 GEMMs, about a second each), run here as one more interleaved contender, so that it sees the
    same machine state as the models; the peak is the best reading, as the probe defines it."""
    from ffnbench.accounting import count_flops
    from ffnbench.config import model_config
    from ffnbench.throughput import cpu_peak_flops, measure_cpu_peak_flops
    from ffnbench.tokenizer import vocab_size_for

    s = ctx.sizes
    rows, notes, probe_readings = [], [], []
    load = {"before": load_snapshot()}
    if ctx.gpu:
        peak, peak_source = peak_for(ctx)
        peak_info: dict[str, Any] = {"peak_flops": peak, "source": peak_source}
    for model, batch in s.mfu_models:
        warmup, steps = s.mfu_steps[model]
        overrides = pipeline_overrides(ctx, model, batch)
        pipeline = Pipeline(ctx, overrides, warmup, steps)
        cfg = pipeline.cfg
        mcfg = model_config(cfg, vocab_size_for(cfg.data))
        flops = count_flops(mcfg)
        trials: dict[str, Callable[[], float]] = {"hand": _hand_trial(ctx, cfg, warmup, steps), "pipeline": pipeline}
        if not ctx.gpu:
            trials["probe"] = lambda: measure_cpu_peak_flops(seconds=0.3 if ctx.quick else 1.0)
        results = interleaved(trials, s.mfu_reps)
        probe_readings += results.get("probe", [])
        rows.append({"model": model, "d_model": mcfg.d_model, "n_layer": mcfg.n_layer, "seq_len": mcfg.seq_len,
                     "batch_size": batch, "flops_per_token": flops.training, "flops": flops.as_dict(),
                     "hand_tokens_per_s": summarize(results["hand"]),
                     "pipeline_tokens_per_s": summarize(results["pipeline"]),
                     "raw": dict(results)})
    if not ctx.gpu:
        peak = max(probe_readings)
        cached = cpu_peak_flops(ctx.cache_dir)  # what training runs on this machine divide by (best ever seen)
        peak_source = "measured: throughput.measure_cpu_peak_flops, the best reading"
        peak_info = {"peak_flops": peak, "source": peak_source, "probe_readings": summarize(probe_readings),
                     "probe": "fp32 torch.mm of two 1024×1024 matrices, 4 back-to-back per timing, best timing over "
                              "about 1 s, with torch's default thread count; interleaved with the model runs",
                     "training_runs_peak_flops": cached,
                     "training_runs_peak_source": "throughput.cpu_peak_flops: the best probe reading ever cached "
                                                  "in data.cache_dir for this CPU, thread count and torch"}
    for row in rows:
        for who in ("hand", "pipeline"):
            mfus = [t * row["flops_per_token"] / peak for t in row["raw"][who]] if peak else None
            row[f"{who}_mfu"] = summarize(mfus) if mfus else None
            row[f"{who}_achieved_flops"] = row[f"{who}_tokens_per_s"]["median"] * row["flops_per_token"]
        row["peak_flops"] = peak
        if not ctx.gpu and row["model"] == "tiny" and row["pipeline_mfu"]:
            row["goal"] = GOALS["cpu_mfu_tiny"]
            row["meets_goal"] = row["pipeline_mfu"]["median"] >= GOALS["cpu_mfu_tiny"]
    load["after"] = load_snapshot()
    table = format_table(
        ["model", "tokens/step", "FLOPs/token", "hand tok/s", "hand MFU", "pipeline tok/s", "pipeline MFU", "goal"],
        [[r["model"], r["batch_size"] * r["seq_len"], _fmt(float(r["flops_per_token"]), ".3g"),
          med_iqr(r["hand_tokens_per_s"], ".0f"), med_iqr(r["hand_mfu"], ".3f") if r["hand_mfu"] else "—",
          med_iqr(r["pipeline_tokens_per_s"], ".0f"), med_iqr(r["pipeline_mfu"], ".3f") if r["pipeline_mfu"] else "—",
          (f"≥ {r['goal']} {'met' if r['meets_goal'] else 'NOT met'}" if "goal" in r else "")] for r in rows])
    notes.append(f"peak {_fmt(peak, '.4g')} FLOP/s: {peak_source}")
    if not ctx.gpu:
        pr = peak_info["probe_readings"]
        notes.append(f"probe readings: median {pr['median']:.4g}, IQR {pr['iqr']:.3g}, n={pr['n']}; training runs here "
                     f"divide by the best cached reading, {peak_info['training_runs_peak_flops']:.4g} FLOP/s")
    notes.append("model FLOPs per token = accounting.count_flops(...).training: 6 × matmul weights (tied head "
                 "included) + the attention context term, at the model's seq_len")
    _print_block("2. MFU", table, notes)
    settings = {"overrides": {m: pipeline_overrides(ctx, m, b) for m, b in s.mfu_models}, "steps": s.mfu_steps,
                "reps": s.mfu_reps, "device": str(ctx.device), "compile": ctx.gpu,
                "precision": "bf16-mixed" if ctx.gpu else "32-true"}
    return ctx.record("mfu", settings, rows, load, peak=peak_info, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# 3. FFN variants
# ---------------------------------------------------------------------------------------------------------


class Trial:
    """Times `call`: `inner` back-to-back calls per repetition, after a warm-up whose first call (the one that
    compiles, when compiled) is kept apart."""

    ctx: Context
    inner: int
    first_call_s: float | None = None

    def call(self) -> None:
        raise NotImplementedError

    def warm_up(self, calls: int = 3) -> None:
        self.first_call_s = time_call(self.call, self.ctx.device)
        for _ in range(calls - 1):
            self.call()

    def __call__(self) -> float:
        return time_call(self.call, self.ctx.device, self.inner)


class LayerTrial(Trial):
    """Forward + backward of one FFN layer over `n_tokens` tokens (weights' and input's gradients)."""

    def __init__(self, ctx: Context, ffn: torch.nn.Module, n_tokens: int, d_model: int, inner: int,
                 compile: bool = False):
        gen = torch.Generator().manual_seed(0)
        self.ctx, self.inner, self.module = ctx, inner, ffn.to(ctx.device)
        self.fn = torch.compile(self.module) if compile else self.module
        self.x = torch.randn(n_tokens, d_model, generator=gen).to(ctx.device).requires_grad_(True)
        self.grad = torch.randn(n_tokens, d_model, generator=gen).to(ctx.device)

    def call(self) -> None:
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)
        with self.ctx.autocast():
            y = self.fn(self.x)
        if self.grad.dtype != y.dtype:
            self.grad = self.grad.to(y.dtype)
        y.backward(self.grad)


class StepTrial(Trial):
    """One whole training step (the hand loop's: forward, backward, clipping, AdamW) of a model."""

    def __init__(self, ctx: Context, cfg, mcfg, batches, inner: int, compile: bool):
        self.ctx, self.inner = ctx, inner
        self.loop = HandLoop(ctx, cfg, mcfg=mcfg, batches=batches, compile=compile)

    def call(self) -> None:
        self.loop.step()


def bench_variants(ctx: Context) -> dict:
    # Every variant recompiles FeedForward.forward (and Block.forward): beyond dynamo's default limit of 8 it would
    # silently run the rest eagerly.
    with torch._dynamo.config.patch(recompile_limit=max(64, torch._dynamo.config.recompile_limit)):
        return _bench_variants(ctx)


def _bench_variants(ctx: Context) -> dict:
    import dataclasses

    from ffnbench.config import model_config
    from ffnbench.ffn import VARIANTS, FeedForward, FFNSpec
    from ffnbench.tokenizer import vocab_size_for

    s = ctx.sizes
    names = list(s.variants or VARIANTS)
    compiled = set(names if s.variant_compile is True else (s.variant_compile or ()))
    cfg = Pipeline(ctx, pipeline_overrides(ctx, s.variant_model, s.variant_batch), 0, 1).cfg
    base = model_config(cfg, vocab_size_for(cfg.data))
    batches = data_batches(cfg, base.seq_len, pin=ctx.gpu)
    n_tokens = s.variant_batch * base.seq_len
    load = {"before": load_snapshot()}
    trials: dict[str, LayerTrial | StepTrial] = {}
    specs = {}
    for name in names:
        spec = FFNSpec(act=name, budget=4)
        specs[name] = spec
        mcfg = dataclasses.replace(base, ffn=spec)
        for mode in ("eager", "compiled") if name in compiled else ("eager",):
            c = mode == "compiled"
            torch.manual_seed(0)
            trials[f"{name}/layer/{mode}"] = LayerTrial(ctx, FeedForward(base.d_model, spec), n_tokens, base.d_model,
                                                        s.variant_layer_inner, compile=c)
            trials[f"{name}/step/{mode}"] = StepTrial(ctx, cfg, mcfg, batches, s.variant_step_inner, compile=c)
    for trial in trials.values():
        trial.warm_up()
    results = interleaved(trials, s.variant_reps)
    load["after"] = load_snapshot()
    ms = {k: summarize([1e3 * v for v in vals]) for k, vals in results.items()}
    rows = []
    for name in names:
        size = FeedForward(base.d_model, specs[name]).size
        row: dict[str, Any] = {"variant": name, "gated": specs[name].gated, "d_model": base.d_model,
                               "d_ff": size.d_ff, "ffn_params_per_layer": size.params,
                               "budget_mismatch": size.mismatch, "n_layer": base.n_layer, "tokens": n_tokens}
        for what in ("layer", "step"):
            for mode in ("eager", "compiled"):
                key = f"{name}/{what}/{mode}"
                row[f"{what}_{mode}_ms"] = ms.get(key)
                row[f"{what}_{mode}_first_call_s"] = trials[key].first_call_s if key in trials else None
            if f"{name}/{what}/compiled" in results:
                row[f"{what}_compile_speedup"] = summarize(paired_ratios(results[f"{name}/{what}/eager"],
                                                                         results[f"{name}/{what}/compiled"]))
            else:
                row[f"{what}_compile_speedup"] = None
        row["ffn_share_of_step"] = (base.n_layer * ms[f"{name}/layer/eager"]["median"]
                                    / ms[f"{name}/step/eager"]["median"])
        rows.append(row)
    ref = next((r for r in rows if r["variant"] == "gelu"), rows[0])
    for row in rows:
        row["step_vs_" + ref["variant"]] = row["step_eager_ms"]["median"] / ref["step_eager_ms"]["median"]
    table = format_table(
        ["variant", "d_ff", "FFN params", "layer ms eager", "layer ms compiled", "speed-up", "step ms eager",
         "step ms compiled", "speed-up", f"step ÷ {ref['variant']}", "FFN share of step"],
        [[r["variant"], r["d_ff"], f"{r['ffn_params_per_layer']:,}", med_iqr(r["layer_eager_ms"], ".3g"),
          med_iqr(r["layer_compiled_ms"], ".3g") if r["layer_compiled_ms"] else "—",
          _fmt(r["layer_compile_speedup"]["median"], ".2f") + "×" if r["layer_compile_speedup"] else "—",
          med_iqr(r["step_eager_ms"], ".4g"),
          med_iqr(r["step_compiled_ms"], ".4g") if r["step_compiled_ms"] else "—",
          _fmt(r["step_compile_speedup"]["median"], ".2f") + "×" if r["step_compile_speedup"] else "—",
          f"{r['step_vs_' + ref['variant']]:.3f}", f"{r['ffn_share_of_step']:.0%}"] for r in rows])
    notes = [f"model {s.variant_model} (d_model={base.d_model}, {base.n_layer} layers), {n_tokens} tokens per "
             f"call/step; every variant at ffn.budget=4 (the parameters of a 4·d ungated FFN)",
             f"median ± IQR/2 of {s.variant_reps} interleaved repetitions (layer: {s.variant_layer_inner} calls each, "
             f"step: {s.variant_step_inner} steps each), after 3 warm-up calls (compilation included there)",
             "compiled: torch.compile of the FFN module (layer) and of each block in place, as trainer.compile=true "
             "does (step); FFN share of step = n_layer × layer time ÷ step time (eager)"]
    _print_block("3. FFN variants at matched budget", table, notes)
    settings = {"overrides": pipeline_overrides(ctx, s.variant_model, s.variant_batch), "budget": 4,
                "tokens": n_tokens, "reps": s.variant_reps, "layer_inner": s.variant_layer_inner,
                "step_inner": s.variant_step_inner, "warmup_calls": 3, "compiled": sorted(compiled),
                "device": str(ctx.device), "autocast": "bf16" if ctx.gpu else None}
    return ctx.record("variants", settings, rows, load, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# 4. d_ff alignment (claim C9)
# ---------------------------------------------------------------------------------------------------------

ALIGNMENT_ROWS = ((682, 1), (704, 64), (768, 256))  # SwiGLU at d_model 256: 2/3·4·256 = 682.7 rounded three ways


def bench_alignment(ctx: Context) -> dict:
    from ffnbench.ffn import FeedForward, FFNSpec, ffn_matmul_params

    s = ctx.sizes
    d = s.align_d_model
    load = {"before": load_snapshot()}
    trials, specs = {}, {}
    for d_ff, multiple_of in ALIGNMENT_ROWS:
        spec = FFNSpec(act="swiglu", width=d_ff / d, multiple_of=multiple_of)  # exactly d_ff (d_ff / d is exact)
        torch.manual_seed(0)
        ffn = FeedForward(d, spec)
        assert ffn.size.d_ff == d_ff, (ffn.size.d_ff, d_ff)
        specs[d_ff] = (spec, ffn.size)
        trials[d_ff] = LayerTrial(ctx, ffn, s.align_tokens, d, s.align_inner)
    for trial in trials.values():
        trial.warm_up(5)
    results = interleaved(trials, s.align_reps)
    load["after"] = load_snapshot()
    rows = []
    for (d_ff, multiple_of), key in zip(ALIGNMENT_ROWS, trials):
        ms = summarize([1e3 * v for v in results[key]])
        spec, size = specs[d_ff]
        matmul = ffn_matmul_params(d, d_ff, True)
        rows.append({"d_ff": d_ff, "multiple_of": multiple_of, "ms_median": ms["median"], "ms_iqr": ms["iqr"],
                     "ms": ms, "params": size.params, "ns_per_param": ms["median"] * 1e6 / size.params,
                     "tflops": 6 * s.align_tokens * matmul / (ms["median"] / 1e3) / 1e12,
                     "d_model": d, "tokens": s.align_tokens, "act": spec.act})
    table = format_table(["d_ff", "multiple of", "ms (fwd+bwd)", "params", "ns/param", "TFLOP/s", "ns/param ÷ 682"],
                         [[r["d_ff"], r["multiple_of"], f"{r['ms_median']:.4g} ± {r['ms_iqr'] / 2:.2g}",
                           f"{r['params']:,}", f"{r['ns_per_param']:.4g}", f"{r['tflops']:.3g}",
                           f"{r['ns_per_param'] / rows[0]['ns_per_param']:.3f}"] for r in rows])
    notes = [f"one SwiGLU FFN layer (no bias), d_model={d}, {s.align_tokens} tokens, forward + backward"
             f"{' under bf16 autocast' if ctx.gpu else ' in fp32'}; median ± IQR/2 of {s.align_reps} interleaved "
             f"repetitions of {s.align_inner} calls; ns/param = median time ÷ FFN parameters",
             "682 = 2/3·4·256 truncated (ffn.budget=4 with multiple_of=1 gives 683); 704 and 768 are the multiples of "
             "64 and 256 above it"]
    if not ctx.gpu:
        notes.append("CPU: no tensor cores, so claim C9 is not tested here (the report marks it inconclusive); the "
                     "rows show how this CPU's GEMMs treat the three sizes")
    _print_block("4. d_ff alignment (claim C9)", table, notes)
    settings = {"d_model": d, "tokens": s.align_tokens, "act": "swiglu", "bias": False, "reps": s.align_reps,
                "inner": s.align_inner, "warmup_calls": 5, "device": str(ctx.device),
                "dtype": "bf16 autocast" if ctx.gpu else "fp32"}
    return ctx.record("alignment", settings, rows, load, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# 5. Startup and data preparation
# ---------------------------------------------------------------------------------------------------------

STARTUP_EVENTS = ("train_start", "data_ready", "first_step_start", "first_step_end", "exit")


class StartupRun:
    """`python -m ffnbench.train <overrides>` in a subprocess; train() writes its timestamps to the file named by
    FFNBENCH_STEP_TIMES. Returns the seconds from just before the process is started to the end of its first
    training step; every event's offset is kept in `events`."""

    def __init__(self, ctx: Context, name: str, overrides: list[str], cold_cache: bool = False):
        self.ctx, self.name, self.overrides, self.cold_cache = ctx, name, overrides, cold_cache
        self.events: list[dict[str, float]] = []
        self.n = 0

    def command(self, run_dir: Path, cache_dir: Path) -> list[str]:
        return [sys.executable, "-m", "ffnbench.train", *self.overrides, f"data.cache_dir={cache_dir}",
                f"hydra.run.dir={run_dir}"]

    def __call__(self) -> float:
        from ffnbench.callbacks import STEP_TIMES_ENV

        self.n += 1
        tag = f"startup-{self.name}-{self.n}"
        marks = self.ctx.work / f"{tag}.jsonl"
        cache = self.ctx.work / f"{tag}-cache" if self.cold_cache else self.ctx.cache_dir
        env = {**os.environ, STEP_TIMES_ENV: str(marks), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
               "WANDB_SILENT": "true"}
        cmd = self.command(self.ctx.work / tag, cache)
        start = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        end = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        seen = {}
        for line in marks.read_text().splitlines():
            mark = json.loads(line)
            seen.setdefault(mark["event"], mark["time"] - start)
        seen["exit"] = end - start
        self.events.append(seen)
        return seen["first_step_end"]


def _prepare_data(ctx: Context, overrides: list[str]) -> None:
    from ffnbench.config import compose
    from ffnbench.data import LMDataModule

    cfg = compose([*overrides, f"data.cache_dir={ctx.cache_dir}"])
    LMDataModule(cfg.data, seq_len=int(cfg.model.seq_len), seed=int(cfg.seed)).prepare_data()


def _data_trial(ctx: Context, overrides: list[str], cold: bool) -> Callable[[], float]:
    """prepare_data() + setup() of the data module, in this process: on an empty cache directory (tokenize and
    write the cache) or on the one the previous call built (verify and memory-map it)."""
    from ffnbench.config import compose
    from ffnbench.data import LMDataModule

    counter = iter(range(10**6))
    cached_dir = ctx.work / "data-cached"

    def load(cache: Path) -> tuple[float, bool]:
        cfg = compose([*overrides, f"data.cache_dir={cache}"])
        start = time.perf_counter()
        dm = LMDataModule(cfg.data, seq_len=int(cfg.model.seq_len), seed=int(cfg.seed))
        dm.prepare_data()
        dm.setup("fit")
        return time.perf_counter() - start, bool(dm.info["from_cache"])

    if not cold:
        load(cached_dir)  # the cache the cached trials read, built outside the timing

    def trial() -> float:
        cache = ctx.work / f"data-cold-{next(counter)}" if cold else cached_dir
        seconds, from_cache = load(cache)
        if from_cache is cold:
            raise RuntimeError(f"data benchmark: expected {'a build' if cold else 'a cache hit'} in {cache}")
        return seconds

    return trial


def bench_startup(ctx: Context) -> dict:
    s = ctx.sizes
    base = [f"model={s.startup_model}", "trainer.max_steps=1"]
    _prepare_data(ctx, [f"model={s.startup_model}"])  # "cached" runs must find the token cache built
    load = {"before": load_snapshot()}
    runs = [StartupRun(ctx, "csv", [*base, "logger=csv"])]
    if not ctx.quick:
        runs.insert(0, StartupRun(ctx, "default", base))  # the default loggers: CSV and wandb (offline)
    results = interleaved({r.name: r for r in runs}, s.startup_reps)
    cold = StartupRun(ctx, "cold-cache", [*base, "logger=csv"], cold_cache=True)
    cold_result = [cold()] if not ctx.quick else []

    data_overrides = [f"model={s.startup_model}"]
    build = _data_trial(ctx, data_overrides, cold=True)
    first_in_process = build()  # the first build in this process also pays one-time imports (datasets)
    data = interleaved({"tokenize": build, "cached": _data_trial(ctx, data_overrides, cold=False)}, s.data_reps)
    load["after"] = load_snapshot()

    rows = []
    labels = {"default": "python -m ffnbench.train (default loggers: CSV + wandb offline)",
              "csv": "python -m ffnbench.train logger=csv",
              "cold-cache": "python -m ffnbench.train logger=csv, empty data cache (tokenizes first)"}
    for run, values in [*((r, results[r.name]) for r in runs), *([(cold, cold_result)] if cold_result else [])]:
        events = {e: summarize([ev[e] for ev in run.events if e in ev]) for e in STARTUP_EVENTS
                  if any(e in ev for ev in run.events)}
        to_first_step = summarize(values)
        rows.append({"what": run.name, "command": labels[run.name] + f" model={s.startup_model} trainer.max_steps=1",
                     "to_first_step_s": to_first_step, "events_s": events, "raw": run.events,
                     "goal_s": GOALS["startup_s"], "meets_goal": to_first_step["median"] <= GOALS["startup_s"]})
    cached = summarize(data["cached"])
    data_rows = [
        {"what": "first tokenization in a fresh process (one-time imports included)",
         "seconds": summarize([first_in_process])},
        {"what": "tokenization (empty cache)", "seconds": summarize(data["tokenize"])},
        {"what": "cached load (verify + memory-map)", "seconds": cached,
         "goal_s": GOALS["cached_load_s"], "meets_goal": cached["median"] <= GOALS["cached_load_s"]},
    ]

    def ev(r: dict, e: str) -> str:
        return f"{r['events_s'][e]['median']:.2f}" if e in r["events_s"] else "—"

    table = format_table(
        ["command", "train() entered s", "data ready s", "first step starts s", "first step done s", "exit s",
         "goal"],
        [[r["what"], ev(r, "train_start"), ev(r, "data_ready"), ev(r, "first_step_start"),
          med_iqr(r["to_first_step_s"], ".2f"), ev(r, "exit"),
          f"≤ {r['goal_s']:g} s {'met' if r['meets_goal'] else 'NOT met'}"] for r in rows])
    data_table = format_table(["data preparation (in process)", "seconds", "goal"],
                              [[r["what"], med_iqr(r["seconds"], ".3f"),
                                (f"≤ {r['goal_s']:g} s {'met' if r['meets_goal'] else 'NOT met'}" if "goal_s" in r
                                 else "")] for r in data_rows])
    notes = [f"times from just before the process is started; median ± IQR/2 of {s.startup_reps} interleaved runs "
             f"(cold cache: 1 run); no compile; model={s.startup_model}, cached data unless stated",
             "data: LMDataModule.prepare_data() + setup() of data=shakespeare (bytes), timed in this process; "
             f"{s.data_reps} interleaved repetitions after the first (which pays the imports)"]
    _print_block("5. Startup", table + "\n\n" + data_table, notes)
    settings = {"model": s.startup_model, "reps": s.startup_reps, "data_reps": s.data_reps,
                "overrides": {r.name: r.overrides for r in [*runs, cold]}, "wandb_mode": "offline",
                "device": "trainer=auto (this machine's default)"}
    return ctx.record("startup", settings, rows, load, data=data_rows, notes=notes)


# ---------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Context], dict]] = {"overhead": bench_overhead, "mfu": bench_mfu,
                                                 "variants": bench_variants, "alignment": bench_alignment,
                                                 "startup": bench_startup}


def parse_only(text: str | None) -> list[str]:
    """'1,3' or 'overhead,variants' (or a mix) → benchmark names in run order; None → all five."""
    if not text:
        return list(BENCHMARKS.values())
    chosen = set()
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.isdigit() and int(item) in BENCHMARKS:
            chosen.add(BENCHMARKS[int(item)])
        elif item in BENCHMARKS.values():
            chosen.add(item)
        else:
            known = ", ".join(f"{i} {n}" for i, n in BENCHMARKS.items())
            raise ConfigError(f"--only: unknown benchmark {item!r}; known: {known}")
    return [name for name in BENCHMARKS.values() if name in chosen]


def resolve_device(name: str) -> torch.device:
    if name not in ("auto", "cpu", "cuda", "gpu"):
        raise ConfigError(f"--device: expected cpu, cuda or auto, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name in ("cuda", "gpu"):
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda: no CUDA GPU is visible here; use --device cpu or auto")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def check_label(label: str) -> str:
    if not label or label in (".", "..") or any(c in label for c in "/\\\0") or label.strip() != label:
        raise ConfigError(f"--label: {label!r} cannot name a folder; use letters, digits, '-', '_' or '.'")
    return label


def _default_cache_dir() -> Path:
    from ffnbench.config import compose

    return Path(str(compose([]).data.cache_dir)).expanduser()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ffnbench.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default=None, help="results folder under --out (default: this machine's hostname)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the <label>/ folder goes (default: %(default)s)")
    p.add_argument("--only", default=None, help="a subset, by number or name: 1,3 or overhead,variants")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repetitions (for the tests)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto (default: %(default)s)")
    return p


@user_errors_exit
def main(argv: list[str] | None = None) -> dict[str, dict]:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    names = parse_only(args.only)
    device = resolve_device(args.device)
    label = check_label(args.label or platform.node() or "unknown")
    out = Path(args.out).expanduser() / label
    started = time.perf_counter()
    command = shlex.join(["python", "-m", "ffnbench.bench", *(sys.argv[1:] if argv is None else argv)])
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # as train() does on a GPU
    with tempfile.TemporaryDirectory(prefix="ffnbench-bench-") as work:
        ctx = Context(label=label, out=out, device=device, quick=args.quick, command=command, work=Path(work),
                      cache_dir=_default_cache_dir(), sizes=sizes_for(args.quick, device.type == "cuda"))
        ctx.machine = machine_info(label, device)
        m = ctx.machine
        print(f"ffnbench bench: {', '.join(names)} on {m['gpu'] or m['cpu']} ({m['cores']} cores, {m['threads']} "
              f"threads, torch {m['torch']}){' [quick]' if args.quick else ''} → {out}")
        snapshot = load_snapshot()
        if snapshot["busy_fraction"] is not None and snapshot["busy_fraction"] > 0.2:
            print(f"ffnbench bench: warning: the machine is busy ({snapshot['busy_fraction']:.0%} of the CPU in use "
                  f"by other processes, load {snapshot['loadavg']}): timings will be low and noisy", file=sys.stderr)
        results = {}
        for name in names:
            t0 = time.perf_counter()
            ctx.meter = LoadMeter()
            results[name] = RUNNERS[name](ctx)
            during = results[name]["load"]["during"]
            busy = f"; other processes used {during['others_busy_fraction']:.1%} of the CPU" if during else ""
            print(f"  ({name}: {time.perf_counter() - t0:.0f} s{busy} → {out / (name + '.json')})")
    total = time.perf_counter() - started
    print(f"\nffnbench bench: done in {total:.0f} s ({total / 60:.1f} min); JSON in {out}")
    return results


if __name__ == "__main__":
    main()
