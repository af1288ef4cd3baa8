"""What one `python -m ffnbench.bench` invocation runs on and how big: the device, the sizes of every benchmark,
the scratch and cache directories, and the goals the tables check."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

# What `make bench` aims for (docs/benchmarks.md); each table says whether it is met.
GOALS = {"overhead_ratio": 0.95, "cpu_mfu_tiny": 0.7, "startup_s": 10.0, "cached_load_s": 1.0}


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does. `full` is what `make bench` runs; `quick` is for the tests."""

    overhead_models: tuple[str, ...]  # measured besides the GPU-sized step
    overhead_gpu_sized: tuple[str, ...]  # the candidates for the GPU-sized step, smallest first
    overhead_steps: dict[str, tuple[int, int, int]]  # model -> (warm-up steps, timed steps per window, windows)
    overhead_batch: dict[str, int]  # a global batch other than the user's default, per model
    overhead_reps: int  # repetitions of the FFN statistics' validation batch
    overhead_profile_steps: int  # steps profiled (0: no profile)
    overhead_floor_steps: int  # steps of Lightning's loop around a one-parameter model (0: not measured)
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
    parallel_model: str = "mini"  # benchmark 6: the run timed alone and as parallel jobs (the CPU campaign's model)
    parallel_steps: int = 300
    parallel_batch: int = 16
    parallel_jobs: int = 2  # at most the machine's cores
    parallel_reps: int = 2


def sizes_for(quick: bool, gpu: bool) -> Sizes:
    """The sizes of a run: `quick` (seconds, for the tests), or the full ones for a GPU or a CPU."""
    if quick:
        return Sizes(
            overhead_models=(), overhead_gpu_sized=("micro",), overhead_steps={"micro": (10, 10, 2)},
            overhead_batch={}, overhead_reps=2, overhead_profile_steps=10, overhead_floor_steps=20,
            mfu_models=(("micro", 8),), mfu_steps={"micro": (10, 10)}, mfu_reps=2,
            variant_model="micro", variant_batch=4, variants=("gelu", "swiglu"), variant_compile=("gelu",),
            variant_layer_inner=2, variant_step_inner=1, variant_reps=2,
            align_d_model=64, align_tokens=64, align_inner=2, align_reps=3,
            startup_model="micro", startup_reps=1, data_reps=1, val_tokens=256,
            parallel_model="micro", parallel_steps=20, parallel_batch=4, parallel_reps=1,
        )
    if gpu:
        return Sizes(
            overhead_models=("tiny", "small"), overhead_gpu_sized=("micro", "tiny", "small"),
            overhead_steps={"micro": (30, 100, 30), "tiny": (30, 100, 30), "small": (20, 50, 20)}, overhead_batch={},
            overhead_reps=5, overhead_profile_steps=200, overhead_floor_steps=1000,
            mfu_models=(("tiny", 32), ("small", 32)), mfu_steps={"tiny": (20, 100), "small": (10, 50)}, mfu_reps=5,
            variant_model="small", variant_batch=32, variants=None, variant_compile=True,
            variant_layer_inner=50, variant_step_inner=10, variant_reps=7,
            align_d_model=256, align_tokens=65536, align_inner=50, align_reps=15,
            startup_model="tiny", startup_reps=3, data_reps=3, val_tokens=4096,
        )
    return Sizes(
        # small at the MFU benchmark's batch of 4: at 32 a CPU step takes tens of seconds
        overhead_models=("tiny", "small"), overhead_gpu_sized=("micro", "tiny", "small"),
        # windows of ~0.5 s or more, made of turns of a pipeline batch each (trainer.inner_steps: 10 at the defaults;
        # the overhead rounds step counts up to whole batches, so these are multiples of it); tiny and small take one
        # turn a window, seconds long, whose ratio still varies by ±10% here: 20 and 8 windows narrow their median
        overhead_steps={"micro": (20, 100, 40), "tiny": (10, 10, 20), "small": (10, 10, 8)},
        overhead_batch={"small": 4},
        overhead_reps=6, overhead_profile_steps=200, overhead_floor_steps=1000,
        mfu_models=(("tiny", 32), ("small", 4)), mfu_steps={"tiny": (10, 20), "small": (10, 10)}, mfu_reps=3,
        variant_model="tiny", variant_batch=32, variants=None, variant_compile=True,
        variant_layer_inner=4, variant_step_inner=2, variant_reps=5,
        align_d_model=256, align_tokens=2048, align_inner=4, align_reps=9,
        startup_model="tiny", startup_reps=3, data_reps=3, val_tokens=4096,
    )


@dataclass(frozen=True)
class BenchSession:
    """One invocation of the benchmarks: the device they time, how big they are, and where they work.

    Args:
        device: the torch device every model and timed call runs on.
        quick: the --quick sizes (also drops the slowest contenders of the startup benchmark).
        sizes: how much each benchmark does (`sizes_for`).
        work: scratch space for run directories and caches, deleted at the end.
        cache_dir: the token cache the pipeline and the reference loop read (the user's data.cache_dir).
    """

    device: torch.device
    quick: bool
    sizes: Sizes
    work: Path
    cache_dir: Path

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> contextlib.AbstractContextManager:
        """The GPU's autocast as trainer=gpu trains (bf16, or fp16 before Ampere), nothing on the CPU (fp32)."""
        if self.gpu:
            return torch.autocast("cuda", dtype=torch.bfloat16 if self.precision == "bf16-mixed" else torch.float16)
        return contextlib.nullcontext()

    def trainer_overrides(self) -> list[str]:
        """The trainer a user gets on this device: trainer=gpu (mixed precision, compiled blocks) or the CPU (fp32)."""
        return ["trainer=gpu"] if self.gpu else ["trainer.accelerator=cpu"]

    @functools.cached_property
    def precision(self) -> str:
        """What trainer=gpu trains in here (placement.resolve_precision: bf16-mixed from compute capability 8.0 on,
        16-mixed before it), 32-true on the CPU."""
        from ffnbench.placement import resolve_precision

        return resolve_precision("gpu" if self.gpu else "cpu", "auto")
