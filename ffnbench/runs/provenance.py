"""What a run or a benchmark ran with, recorded beside its numbers: the software versions, the git revision of the
code, and the machine (CPU, GPU and what decides its numerics)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "lightning", "datasets", "wandb", "hydra-core", "numpy", "tokenizers", "scipy", "triton",
            "ffnbench")


def versions() -> dict[str, str | None]:
    """Python's version and each of PACKAGES' (None: not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(cwd: Path | None = None) -> dict[str, Any]:
    """The checkout's commit and whether it had uncommitted changes (None outside a git checkout): a changed
    tracked file or an untracked one (a new module that is not committed ran too); what git ignores is not code.

    Args:
        cwd: a directory inside the checkout (default: ffnbench's own)."""
    cwd = cwd or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    revision = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=normal") if revision else None
    return {"revision": revision, "dirty": bool(status) if status is not None else None}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_record(accelerator: str) -> dict[str, Any]:
    """The machine a run or a benchmark ran on, and what decides its GPU numerics: the NVIDIA driver, cuDNN, and
    the float32 matmul precision (highest, or high = TF32 on a GPU) in force (Triton's version: `versions`).
    A run's record holds it in its `hardware` block, a benchmark file in its `machine` block.

    Args:
        accelerator: the resolved accelerator, "cpu" or "gpu"."""
    import torch

    from ffnbench.placement import nvidia_driver_version

    info: dict[str, Any] = {
        "accelerator": accelerator,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": platform.node(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "driver": nvidia_driver_version() if accelerator == "gpu" else None,
        "cudnn": torch.backends.cudnn.version() if accelerator == "gpu" else None,
    }
    if accelerator == "gpu" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_count"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
        info["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return info
