"""Where a run trains: the one device resolver (train, bench and sweep all use it), the precision it gets,
why CUDA sees no GPU when one is asked for, and the per-GPU lock for parallel runs on one node. A run's processes
(ranks, the DDP environment, the relaunch patch) are ddp.py's."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ffnbench.ddp import local_rank
from ffnbench.errors import ConfigError

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")


class TrainerSettings(Protocol):
    """What resolve_device_setup reads of a run's trainer settings (config.schema.TrainerConfig has them)."""

    accelerator: str  # ACCELERATORS
    devices: int
    precision: str  # PRECISIONS
    strategy: str


def check_accelerator(requested: Any, field: str = "trainer.accelerator") -> str:
    """`requested` if it names an accelerator (ACCELERATORS), else a ConfigError naming `field`: judged without
    looking at the machine."""
    if requested not in ACCELERATORS:
        raise ConfigError(f"{field}: expected auto, cpu or gpu, got {requested!r}")
    return requested


def resolve_accelerator(requested: str, field: str = "trainer.accelerator") -> str:
    """auto | cpu | gpu | cuda → "cpu" or "gpu": the one place that decides which device a run or a benchmark
    uses. auto takes the GPU when CUDA sees one; asking for a GPU where none is visible is an error."""
    check_accelerator(requested, field)
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return "gpu" if cuda else "cpu"
    accelerator = "gpu" if requested == "cuda" else requested
    if accelerator == "gpu" and not cuda:
        raise ConfigError(f"{field}={requested}: no CUDA GPU is visible here ({why_no_cuda()}); use cpu or auto")
    return accelerator


# The CUDA wheels of torch (download.pytorch.org/whl/<tag>) and the oldest Linux driver that runs each CUDA
# major version (NVIDIA's CUDA compatibility tables; a driver runs every minor version of its major).
# Newest first: the wheel to suggest is the first whose driver the node has.
CUDA_WHEELS = (("cu130", 13, 580), ("cu126", 12, 525))  # torch 2.13's CUDA builds (cu118 ended with torch 2.7)
README_GPU = "README: GPU nodes"


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version (e.g. "535.104.05"), read without CUDA: from the kernel module, else
    from nvidia-smi. None when there is no driver."""
    with contextlib.suppress(OSError):
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)",
                          Path("/proc/driver/nvidia/version").read_text())
        if found:
            return found.group(1)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def wheel_for_driver(driver: str) -> str | None:
    """The newest CUDA wheel tag of torch that `driver` runs (None: too old for any)."""
    major = int(driver.split(".")[0])
    return next((tag for tag, _, oldest in CUDA_WHEELS if major >= oldest), None)


def pip_command(tag: str) -> str:
    return f"`.venv/bin/pip install 'torch>=2.13,<2.14' --index-url https://download.pytorch.org/whl/{tag}`"


def why_no_cuda() -> str:
    """Why torch.cuda.is_available() is False here, in one clause with the fix: a CPU-only torch, GPUs hidden by
    CUDA_VISIBLE_DEVICES, no NVIDIA driver, or a driver older than the CUDA this torch was built for."""
    built = torch.version.cuda
    if built is None:
        return (f"torch {torch.__version__} is a CPU-only build; install the CUDA wheel that the node's driver runs, "
                f"e.g. {pip_command('cu126')} ({README_GPU})")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES is empty ({visible!r}): this process was given no GPU"
    driver = nvidia_driver_version()
    if driver is None:
        return (f"no NVIDIA driver found (no /proc/driver/nvidia/version, no nvidia-smi); torch {torch.__version__} "
                f"is built for CUDA {built}")
    needed = next((oldest for _, major, oldest in CUDA_WHEELS if str(major) == built.split(".")[0]), None)
    wheel = wheel_for_driver(driver)
    fix = f"install the wheel for this driver: {pip_command(wheel)}" if wheel else "update the NVIDIA driver"
    return (f"torch {torch.__version__} is built for CUDA {built}, which needs driver ≥ {needed or '?'}; this node has "
            f"NVIDIA driver {driver}: {fix} ({README_GPU})")


def compute_capabilities() -> list[tuple[int, int]]:
    """The compute capability of every visible GPU. A device-properties query: it allocates nothing on any GPU
    (torch.cuda.is_bf16_supported() would, on GPU 0, on a pre-Ampere GPU)."""
    return [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]


def _has_kernels(capability: tuple[int, int]) -> bool:
    """Whether this torch build carries code for a GPU of `capability`: a cubin of the same major version and a
    minor version not above it, or PTX of a version not above it (compiled when loaded)."""
    for arch in torch.cuda.get_arch_list():
        kind, _, digits = arch.partition("_")
        digits = digits.rstrip("af")  # sm_90a, sm_100f: the same architecture with extra features
        if not digits.isdigit():
            continue
        version = (int(digits[:-1]), int(digits[-1]))
        if (kind == "sm" and version[0] == capability[0] and version <= capability) or \
                (kind == "compute" and version <= capability):
            return True
    return False


def check_gpu_kernels(capabilities: list[tuple[int, int]]) -> None:
    """A ConfigError when this torch has no kernels for a visible GPU (the CUDA 13 wheels dropped Volta and
    older): CUDA sees the GPU, but the first kernel would fail."""
    for index, capability in enumerate(capabilities):
        if not _has_kernels(capability):
            name = torch.cuda.get_device_name(index)
            raise ConfigError(
                f"trainer.accelerator: torch {torch.__version__} (CUDA {torch.version.cuda}) has no kernels for "
                f"{name} (compute capability {capability[0]}.{capability[1]}); install a wheel built for it, e.g. "
                f"{pip_command('cu126')} ({README_GPU})")


PRECISIONS = ("auto", "64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
              "64", "32", "16", "bf16", "transformer-engine", "transformer-engine-float16")  # Lightning's names
PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}  # Lightning's


def resolve_precision(accelerator: str, requested: str, capabilities: list[tuple[int, int]] | None = None) -> str:
    """The precision a run gets, in Lightning's full name. auto: fp32 on the CPU; on GPUs bf16-mixed when every
    visible GPU (`capabilities`, default: asked here) has bf16 tensor cores (compute capability ≥ 8.0, Ampere on),
    else 16-mixed (V100, T4: their bf16 is emulated, slower than fp32)."""
    if requested != "auto":
        return PRECISION_ALIASES.get(str(requested), str(requested))
    if accelerator != "gpu":
        return "32-true"
    return "bf16-mixed" if min(capabilities or compute_capabilities()) >= (8, 0) else "16-mixed"


def visible_gpu_count() -> int:
    """How many GPUs CUDA shows this process (no context is opened to count them)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torch_device(accelerator: str) -> torch.device:
    """The torch device of a resolved accelerator ("cpu" or "gpu")."""
    return torch.device("cuda", torch.cuda.current_device()) if accelerator == "gpu" else torch.device("cpu")


@dataclass(frozen=True)
class DeviceSetup:
    """What Lightning's Trainer gets on this machine, as resolve_device_setup decides it from `cfg.trainer`; a run's
    record keeps it in its `hardware` block, beside the machine it ran on (provenance.machine_record)."""

    accelerator: str  # cpu | gpu
    devices: int
    precision: str
    strategy: str


def resolve_device_setup(t: TrainerSettings) -> DeviceSetup:
    """A run's trainer settings (checked: config.schema.TrainerConfig) → the accelerator, device count, precision
    and strategy Lightning gets here."""
    accelerator = resolve_accelerator(t.accelerator)
    devices = t.devices
    available = torch.cuda.device_count() if accelerator == "gpu" else (os.cpu_count() or 1)
    if devices > available:
        what = "GPUs" if accelerator == "gpu" else "CPU cores (one process per device)"
        raise ConfigError(f"trainer.devices={devices}: only {available} {what} available here")
    capabilities = compute_capabilities() if accelerator == "gpu" else None
    if capabilities:
        check_gpu_kernels(capabilities)
    precision = resolve_precision(accelerator, t.precision, capabilities)
    strategy = t.strategy
    if strategy == "auto" and devices > 1:
        strategy = "ddp"
    return DeviceSetup(accelerator, devices, precision, str(strategy))


def planned_device_setup(t: TrainerSettings, here: bool) -> tuple[str | None, str | None]:
    """(accelerator, precision) that a run of `t` will resolve to, as far as can be told before it starts: the
    run's own resolve_device_setup when it will start on this machine (`here`); else (a SLURM node) only what does not
    depend on the node. None: decided where the run starts (or refused there, with its reason)."""
    if here:
        try:
            setup = resolve_device_setup(t)
        except ConfigError:
            return None, None
        return setup.accelerator, setup.precision
    accelerator = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu"}.get(t.accelerator)
    if t.precision != "auto":
        return accelerator, resolve_precision("gpu", t.precision)
    return accelerator, ("32-true" if accelerator == "cpu" else None)


def share_cpu_threads(setup: DeviceSetup) -> None:
    """On a CPU, processes that train at once (DDP ranks, parallel sweep jobs) share the cores instead of each
    using all of them."""
    processes = setup.devices * parallel_jobs()
    if setup.accelerator == "cpu" and processes > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))


def submitit_slurm_task() -> bool:
    """Whether this process is a task of a SLURM job that submitit started: SLURM gave the job its own GPUs. A
    SLURM allocation alone says nothing of the kind (a joblib sweep inside one shares its GPUs), nor does
    submitit's local executor (it gives every job the same GPUs)."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm"


LEASE_ENV = "FFNBENCH_GPU_LEASE"  # the GPUs a leased DDP run holds, for the ranks Lightning spawns (they inherit it)


def parallel_launcher() -> bool:
    """Whether several runs may start on this node at once: a joblib sweep of more than one job, or submitit's local
    executor (it gives every job the same GPUs)."""
    return parallel_jobs() > 1 or os.environ.get("SUBMITIT_EXECUTOR") == "local"


@contextlib.contextmanager
def claim_devices(setup: DeviceSetup) -> Iterator[int | list[int]]:
    """The `devices` Lightning gets, held for the block: GPUs are leased for it (and given back however the block
    ends), so that runs started in parallel on one node (joblib, submitit_local, also inside a SLURM allocation)
    each get their own — one GPU for a single-GPU run, even on a node with one GPU (the runs then queue for it), and
    setup.devices of them for a DDP run under a parallel launcher, which its spawned ranks inherit (LEASE_ENV). A
    submitit SLURM task (pinned by SLURM), and a DDP run alone on its node, take what they see. On a GPU, float32
    matmuls may use TF32."""
    if setup.accelerator != "gpu":
        yield setup.devices
        return
    torch.set_float32_matmul_precision("high")
    inherited = os.environ.get(LEASE_ENV)
    if inherited and local_rank() > 0:  # a rank the leased parent spawned: its GPUs, already held for it
        yield [int(i) for i in inherited.split(",")]
        return
    if submitit_slurm_task() or (setup.devices > 1 and not parallel_launcher()):
        yield setup.devices
        return
    lease = GpuLease(torch.cuda.device_count(), count=setup.devices)
    os.environ[LEASE_ENV] = ",".join(map(str, lease.indices))
    try:
        yield list(lease.indices)
    finally:
        os.environ.pop(LEASE_ENV, None)
        lease.release()


def gpu_keys(n_gpus: int) -> list[str]:
    """A name per visible GPU that is the same in every process whatever its CUDA_VISIBLE_DEVICES: the device's
    UUID where CUDA reports one, else its index (then jobs with different CUDA_VISIBLE_DEVICES are not told apart)."""
    keys = []
    for i in range(n_gpus):
        try:
            uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        except (RuntimeError, AssertionError, AttributeError):
            uuid = None
        keys.append(f"-{uuid}" if uuid else str(i))
    return keys


class GpuLease:
    """GPUs for one run when a sweep runs several runs at once on one node (joblib, submitit_local): the run takes
    an exclusive lock on `count` GPUs that no other ffnbench run on this machine holds, keyed by the physical GPU
    (gpu_keys), all or none (a DDP run never holds half its GPUs while it waits). The locks go with the run's end,
    or with its process if it dies. Hydra does not do this for you."""

    def __init__(self, n_gpus: int, count: int = 1, lock_dir: Path | None = None, poll_s: float = 5.0,
                 keys: list[str] | None = None):
        import fcntl

        if count > n_gpus:
            raise ConfigError(f"trainer.devices={count}: this node shows {n_gpus} GPU{'s' * (n_gpus != 1)}")
        lock_dir = lock_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"ffnbench-gpu-locks-{os.getuid()}"
        lock_dir.mkdir(parents=True, exist_ok=True)
        keys = keys or gpu_keys(n_gpus)
        while True:
            held: list[tuple[int, Any]] = []
            for index in range(n_gpus):
                handle = open(lock_dir / f"gpu{keys[index]}.lock", "w")  # noqa: SIM115 - held for the run
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                held.append((index, handle))
                if len(held) == count:
                    self.indices = [i for i, _ in held]
                    self.index = self.indices[0]
                    self._handles = [h for _, h in held]
                    return
            for _, handle in held:  # not enough free: give back what was taken, and wait for a run to end
                handle.close()
            time.sleep(poll_s)

    def release(self) -> None:
        for handle in self._handles:
            handle.close()


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
