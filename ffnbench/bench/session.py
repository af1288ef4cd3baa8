"""What one `python -m ffnbench.bench` invocation runs on and how big: the device, each benchmark's sizes, and the
scratch and cache directories."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# The sizes every benchmark module holds in its SIZES, by preset: "quick" (seconds, for the tests), or the full sizes
# for a GPU or a CPU.
PRESETS = ("quick", "cpu", "gpu")


def preset(quick: bool, gpu: bool) -> str:
    """The preset of a run: `quick` whatever the device, else the device's full sizes."""
    return "quick" if quick else "gpu" if gpu else "cpu"


@dataclass(frozen=True)
class BenchSession:
    """One invocation of the benchmarks: the device they time, how big they are, and where they work.

    Args:
        device: the torch device every model and timed call runs on.
        quick: the --quick sizes (also drops the slowest contenders of the startup benchmark).
        sizes: each benchmark's sizes by its name (its module's SIZES at this session's preset).
        work: scratch space for run directories and caches, deleted at the end.
        cache_dir: the token cache the pipeline and the reference loop read (the user's data.cache_dir).
    """

    device: torch.device
    quick: bool
    sizes: Mapping[str, Any]
    work: Path
    cache_dir: Path

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def val_tokens(self) -> int:
        """The pipeline's validation set: outside every timed window, kept small to save time."""
        return 256 if self.quick else 4096

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
