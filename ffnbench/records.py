"""Run records: result.json (atomic writes, tolerant reads) and the provenance every record carries."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

RUN_CONFIG_FILE = "run_config.json"
SWEEP_MANIFEST = "sweep.json"  # a sweep's command and run directories (written by ffnbench.sweep)
PACKAGES = ("torch", "lightning", "datasets", "wandb", "hydra-core", "numpy", "tokenizers", "scipy", "triton",
            "ffnbench")


def json_safe(value: Any) -> Any:
    """NaN/inf are not JSON: a diverged loss is recorded as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = True) -> Iterator[BinaryIO]:
    """Open `path` for writing (binary) through a temporary file in the same directory that is fsynced and
    renamed over the target only when the block completes: a reader (or a crash) sees the old file or the new
    one, never half of one. `durable=False` skips the fsync: still atomic for readers and for a process that dies
    (the kernel holds the data), not against a power cut — for files rewritten every few steps, where an fsync on a
    network filesystem costs milliseconds each time (the checkpoints write them durably)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; records and caches are meant to be shared
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone already once renamed


def write_json_atomic(path: Path, data: dict, durable: bool = True) -> None:
    """`data` as indented JSON (NaN/inf as null), written with `atomic_file`."""
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    with atomic_file(path, durable) as f:
        f.write(text.encode())


class CorruptRecord(Exception):
    """A record file that exists but cannot be read as a record."""


def read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def ffn_record(spec: Any, size: Any) -> dict[str, Any]:
    """result.json's `ffn` block: the spec (ffn.FFNSpec) and its sizes (ffn.FFNSize)."""
    return {
        "act": spec.act, "gated": spec.gated, "sizing": spec.sizing, "ratio": spec.ratio, "bias": spec.bias,
        "multiple_of": spec.multiple_of, "approximate": spec.approximate, "label": spec.label,
        "nominal_d_ff": size.nominal_d_ff, "d_ff": size.d_ff, "params_per_layer": size.params,
        "target_params": size.target_params, "budget_mismatch": size.mismatch, "rounding": spec.rounding,
    }


def model_record(mcfg: Any, name: str | None) -> dict[str, Any]:
    """result.json's `model` block, from a model.ModelConfig."""
    return {"name": name, "d_model": mcfg.d_model, "n_layer": mcfg.n_layer, "n_head": mcfg.n_head,
            "seq_len": mcfg.seq_len, "vocab_size": mcfg.vocab_size}


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_revision(cwd: Path | None = None) -> dict[str, Any]:
    """The checkout's commit and whether it had uncommitted changes (None outside a git checkout): a changed
    tracked file or an untracked one (a new module that is not committed ran too); what git ignores is not code."""
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
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(accelerator: str) -> dict[str, Any]:
    """The machine a run or a benchmark ran on, and what decides its GPU numerics: the NVIDIA driver, cuDNN, and
    the float32 matmul precision (highest, or high = TF32 on a GPU) in force (Triton's version: `versions`)."""
    import torch

    from ffnbench.hardware import nvidia_driver_version

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
