"""Where a run trains: the one device resolver (train, bench and sweep all use it), the precision it gets,
the per-GPU lock for parallel runs on one node, the process ranks, and the DDP relaunch patch."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ffnbench.errors import ConfigError

if TYPE_CHECKING:
    from ffnbench.config import TrainerConfig

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")


def resolve_accelerator(requested: str, field: str = "trainer.accelerator") -> str:
    """auto | cpu | gpu | cuda → "cpu" or "gpu": the one place that decides which device a run or a benchmark
    uses. auto takes the GPU when CUDA sees one; asking for a GPU where none is visible is an error."""
    if requested not in ACCELERATORS:
        raise ConfigError(f"{field}: expected auto, cpu or gpu, got {requested!r}")
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return "gpu" if cuda else "cpu"
    accelerator = "gpu" if requested == "cuda" else requested
    if accelerator == "gpu" and not cuda:
        raise ConfigError(f"{field}={requested}: no CUDA GPU is visible here; use cpu or auto")
    return accelerator


def torch_device(accelerator: str) -> torch.device:
    """The torch device of a resolved accelerator ("cpu" or "gpu")."""
    return torch.device("cuda", torch.cuda.current_device()) if accelerator == "gpu" else torch.device("cpu")


@dataclass(frozen=True)
class Hardware:
    accelerator: str  # cpu | gpu
    devices: int
    precision: str
    strategy: str


def resolve_hardware(t: TrainerConfig) -> Hardware:
    """`cfg.trainer` (checked) → the accelerator, device count, precision and strategy Lightning gets here."""
    accelerator = resolve_accelerator(t.accelerator)
    devices = t.devices
    available = torch.cuda.device_count() if accelerator == "gpu" else (os.cpu_count() or 1)
    if devices > available:
        what = "GPUs" if accelerator == "gpu" else "CPU cores (one process per device)"
        raise ConfigError(f"trainer.devices={devices}: only {available} {what} available here")
    precision = t.precision
    if precision == "auto":
        if accelerator == "gpu":
            precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
        else:
            precision = "32-true"
    strategy = t.strategy
    if strategy == "auto" and devices > 1:
        strategy = "ddp"
    return Hardware(accelerator, devices, str(precision), str(strategy))


def share_cpu_threads(hw: Hardware) -> None:
    """On a CPU, processes that train at once (DDP ranks, parallel sweep jobs) share the cores instead of each
    using all of them."""
    processes = hw.devices * parallel_jobs()
    if hw.accelerator == "cpu" and processes > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))


def claim_devices(hw: Hardware) -> tuple[int | list[int], GpuLease | None]:
    """The `devices` Lightning gets, and the GPU lease to release when the run ends (None when not leased).
    One GPU of several, outside SLURM (which assigns GPUs itself), is leased: parallel runs on one node each
    get their own. On a GPU, float32 matmuls may use TF32."""
    if hw.accelerator != "gpu":
        return hw.devices, None
    torch.set_float32_matmul_precision("high")
    if hw.devices == 1 and torch.cuda.device_count() > 1 and "SLURM_JOB_ID" not in os.environ:
        lease = GpuLease(torch.cuda.device_count())
        return [lease.index], lease
    return hw.devices, None


class GpuLease:
    """One GPU per run when a sweep runs several runs at once on one node (the joblib launcher): each run
    takes an exclusive lock on a GPU that no other ffnbench run on this machine holds. The lock goes with
    the run's end, or with its process if it dies. Hydra does not do this for you."""

    def __init__(self, n_gpus: int, lock_dir: Path | None = None, poll_s: float = 5.0):
        import fcntl

        lock_dir = lock_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"ffnbench-gpu-locks-{os.getuid()}"
        lock_dir.mkdir(parents=True, exist_ok=True)
        while True:
            for index in range(n_gpus):
                handle = open(lock_dir / f"gpu{index}.lock", "w")  # noqa: SIM115 - held for the run
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                self.index, self._handle = index, handle
                return
            time.sleep(poll_s)  # every GPU is busy: wait for a run to end

    def release(self) -> None:
        self._handle.close()


def parallel_jobs() -> int:
    """How many runs the launcher runs at once on this machine (1 unless a joblib sweep)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return 1
    launcher = HydraConfig.get().launcher
    if "joblib" not in str(launcher.get("_target_", "")):
        return 1
    n_jobs = int(launcher.get("n_jobs") or -1)
    return (os.cpu_count() or 1) if n_jobs < 1 else n_jobs


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0)))


def global_rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", local_rank())))


def patch_ddp_child_command() -> None:
    """Lightning relaunches `sys.argv` for each extra DDP process. Under a Hydra sweep that would rerun the
    whole sweep; relaunch this job alone instead: `python -m ffnbench.train <this job's overrides>` in its
    own run directory."""
    from lightning.fabric.strategies.launchers import subprocess_script

    def command(local_rank: int) -> tuple[list[str], str]:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_original_cwd

        hc = HydraConfig.get()
        cmd = [sys.executable, "-m", "ffnbench.train", *hc.overrides.task,
               f'hydra.run.dir="{hc.runtime.output_dir}"', f"hydra.job.name=train_ddp_process_{local_rank}",
               "hydra.output_subdir=null"]
        return cmd, get_original_cwd()

    subprocess_script._hydra_subprocess_cmd = command
