"""Where a run trains: the one device resolver, the hardware a trainer config asks for, thread sharing, the GPU
lease, and the ranks read from the environment."""

import pytest
import torch

from ffnbench import hardware
from ffnbench.config import TrainerConfig
from ffnbench.errors import ConfigError
from ffnbench.hardware import (
    GpuLease,
    Hardware,
    claim_devices,
    global_rank,
    local_rank,
    parallel_jobs,
    resolve_accelerator,
    resolve_hardware,
    share_cpu_threads,
)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)


def test_auto_takes_the_gpu_when_there_is_one(no_gpu):
    assert resolve_accelerator("auto") == "cpu" and resolve_accelerator("cpu") == "cpu"


def test_cuda_is_another_name_for_gpu(two_gpus):
    assert resolve_accelerator("auto") == "gpu" and resolve_accelerator("cuda") == "gpu"


def test_a_gpu_that_is_not_there_is_an_error_naming_the_field(no_gpu):
    with pytest.raises(ConfigError, match=r"^bench\.device=gpu: no CUDA GPU is visible here; use cpu or auto$"):
        resolve_accelerator("gpu", field="bench.device")


def test_an_unknown_accelerator_is_an_error():
    with pytest.raises(ConfigError, match=r"^trainer\.accelerator: expected auto, cpu or gpu, got 'tpu'$"):
        resolve_accelerator("tpu")


def test_cpu_defaults_fp32_and_more_devices_mean_ddp(no_gpu, monkeypatch):
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: 4)
    assert resolve_hardware(TrainerConfig(max_steps=1)) == Hardware("cpu", 1, "32-true", "auto")
    assert resolve_hardware(TrainerConfig(max_steps=1, devices=2)) == Hardware("cpu", 2, "32-true", "ddp")
    with pytest.raises(ConfigError, match=r"trainer\.devices=5: only 4 CPU cores \(one process per device\)"):
        resolve_hardware(TrainerConfig(max_steps=1, devices=5))


def test_gpu_defaults_bf16_and_counts_gpus(two_gpus):
    assert resolve_hardware(TrainerConfig(max_steps=1)) == Hardware("gpu", 1, "bf16-mixed", "auto")
    assert resolve_hardware(TrainerConfig(max_steps=1, precision="32-true")).precision == "32-true"
    with pytest.raises(ConfigError, match=r"trainer\.devices=3: only 2 GPUs available here"):
        resolve_hardware(TrainerConfig(max_steps=1, devices=3))


def test_cpu_processes_share_the_cores(monkeypatch):
    calls = []
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    share_cpu_threads(Hardware("cpu", 1, "32-true", "auto"))  # alone: every core
    share_cpu_threads(Hardware("cpu", 2, "32-true", "ddp"))
    monkeypatch.setattr(hardware, "parallel_jobs", lambda: 3)
    share_cpu_threads(Hardware("cpu", 2, "32-true", "ddp"))  # 6 processes on 8 cores
    share_cpu_threads(Hardware("gpu", 2, "bf16-mixed", "ddp"))  # GPU runs keep their threads
    assert calls == [4, 1]


def test_the_cpu_needs_no_lease():
    assert claim_devices(Hardware("cpu", 2, "32-true", "ddp")) == (2, None)


def test_one_gpu_of_several_is_leased(two_gpus, monkeypatch, tmp_path):
    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda p: None)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(hardware, "GpuLease", lambda n: GpuLease(n, lock_dir=tmp_path))
    devices, lease = claim_devices(Hardware("gpu", 1, "bf16-mixed", "auto"))
    other_devices, other = claim_devices(Hardware("gpu", 1, "bf16-mixed", "auto"))
    assert (devices, other_devices) == ([0], [1])  # two runs at once, one GPU each
    lease.release()
    again, third = claim_devices(Hardware("gpu", 1, "bf16-mixed", "auto"))
    assert again == [0]  # a released GPU is free again
    other.release()
    third.release()
    assert claim_devices(Hardware("gpu", 2, "bf16-mixed", "ddp")) == (2, None)  # DDP takes them all
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    assert claim_devices(Hardware("gpu", 1, "bf16-mixed", "auto")) == (1, None)  # SLURM assigns GPUs itself


def test_ranks_come_from_torchrun_or_slurm(monkeypatch):
    for name in ("LOCAL_RANK", "RANK", "SLURM_LOCALID", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert (local_rank(), global_rank()) == (0, 0)
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_PROCID", "5")
    assert (local_rank(), global_rank()) == (1, 5)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("RANK", "6")
    assert (local_rank(), global_rank()) == (2, 6)


def test_one_job_at_a_time_outside_a_joblib_sweep():
    assert parallel_jobs() == 1
