"""Where a run trains: the one device resolver, the device setup a trainer config asks for, thread sharing and the GPU
lease."""

import pytest
import torch

from ffnbench import placement
from ffnbench.config.compose import compose
from ffnbench.config.schema import TrainerConfig
from ffnbench.errors import ConfigError
from ffnbench.placement import (
    DeviceSetup,
    GpuLease,
    claim_devices,
    parallel_jobs,
    resolve_accelerator,
    resolve_device_setup,
    share_cpu_threads,
)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def two_gpus(monkeypatch):
    """Two Ampere GPUs (compute capability 8.0), as CUDA reports them: no context is opened to ask."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_90"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    for name in ("SLURM_JOB_ID", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(name, raising=False)


def test_auto_takes_the_gpu_when_there_is_one(no_gpu):
    assert resolve_accelerator("auto") == "cpu" and resolve_accelerator("cpu") == "cpu"


def test_cuda_is_another_name_for_gpu(two_gpus):
    assert resolve_accelerator("auto") == "gpu" and resolve_accelerator("cuda") == "gpu"


def test_a_gpu_that_is_not_there_is_an_error_naming_the_field(no_gpu):
    with pytest.raises(ConfigError, match=r"^bench\.device=gpu: no CUDA GPU is visible here \(.+\); use cpu or auto$"):
        resolve_accelerator("gpu", field="bench.device")


def test_an_unknown_accelerator_is_an_error():
    with pytest.raises(ConfigError, match=r"^trainer\.accelerator: expected auto, cpu or gpu, got 'tpu'$"):
        resolve_accelerator("tpu")


def test_cpu_defaults_fp32_and_more_devices_mean_ddp(no_gpu, monkeypatch):
    monkeypatch.setattr(placement.os, "cpu_count", lambda: 4)
    assert resolve_device_setup(TrainerConfig(max_steps=1)) == DeviceSetup("cpu", 1, "32-true", "auto")
    assert resolve_device_setup(TrainerConfig(max_steps=1, devices=2)) == DeviceSetup("cpu", 2, "32-true", "ddp")
    with pytest.raises(ConfigError, match=r"trainer\.devices=5: only 4 CPU cores \(one process per device\)"):
        resolve_device_setup(TrainerConfig(max_steps=1, devices=5))


def test_gpu_defaults_bf16_and_counts_gpus(two_gpus):
    assert resolve_device_setup(TrainerConfig(max_steps=1)) == DeviceSetup("gpu", 1, "bf16-mixed", "auto")
    assert resolve_device_setup(TrainerConfig(max_steps=1, precision="32-true")).precision == "32-true"
    with pytest.raises(ConfigError, match=r"trainer\.devices=3: only 2 GPUs available here"):
        resolve_device_setup(TrainerConfig(max_steps=1, devices=3))


def test_cpu_processes_share_the_cores(monkeypatch):
    calls = []
    monkeypatch.setattr(placement.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    share_cpu_threads(DeviceSetup("cpu", 1, "32-true", "auto"))  # alone: every core
    share_cpu_threads(DeviceSetup("cpu", 2, "32-true", "ddp"))
    monkeypatch.setattr(placement, "parallel_jobs", lambda: 3)
    share_cpu_threads(DeviceSetup("cpu", 2, "32-true", "ddp"))  # 6 processes on 8 cores
    share_cpu_threads(DeviceSetup("gpu", 2, "bf16-mixed", "ddp"))  # GPU runs keep their threads
    assert calls == [4, 1]


def test_the_cpu_needs_no_lease():
    with claim_devices(DeviceSetup("cpu", 2, "32-true", "ddp")) as devices:
        assert devices == 2


@pytest.fixture
def leases(two_gpus, monkeypatch, tmp_path):
    """GPU leases in a private lock folder; float32 matmul precision left alone."""
    monkeypatch.setattr(torch, "set_float32_matmul_precision", lambda p: None)
    monkeypatch.setattr(placement, "GpuLease", lambda n, **kw: GpuLease(n, lock_dir=tmp_path, poll_s=0.01, **kw))
    monkeypatch.delenv(placement.LEASE_ENV, raising=False)
    return tmp_path


def held(lock_dir) -> list[str]:
    """The GPU lock files some open file description holds now."""
    import fcntl

    busy = []
    for path in sorted(lock_dir.glob("gpu*.lock")):
        with open(path, "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                busy.append(path.stem)
    return busy


def test_one_gpu_of_several_is_leased(leases):
    one = DeviceSetup("gpu", 1, "bf16-mixed", "auto")
    with claim_devices(one) as devices, claim_devices(one) as other_devices:
        assert (devices, other_devices) == ([0], [1])  # two runs at once, one GPU each
        assert held(leases) == ["gpu0", "gpu1"]
    with claim_devices(one) as again:
        assert again == [0]  # a released GPU is free again
    with claim_devices(DeviceSetup("gpu", 2, "bf16-mixed", "ddp")) as devices:
        assert devices == 2  # DDP takes them all
    assert held(leases) == []


def test_joblib_inside_a_slurm_allocation_still_leases_a_gpu(leases, monkeypatch):
    """A SLURM allocation with several GPUs and a joblib sweep inside it: SLURM pins nothing per run, so each run
    still takes its own GPU. Only a submitit task (SUBMITIT_EXECUTOR=slurm), which SLURM pins, goes without."""
    one = DeviceSetup("gpu", 1, "bf16-mixed", "auto")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with claim_devices(one) as devices, claim_devices(one) as other_devices:
        assert (devices, other_devices) == ([0], [1])
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")  # submitit_local pins nothing either
    with claim_devices(one) as devices:
        assert devices == [0] and held(leases) == ["gpu0"]
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    with claim_devices(one) as devices:
        assert devices == 1 and held(leases) == []


def test_a_one_gpu_node_queues_its_runs_for_the_gpu(leases, monkeypatch):
    """Two joblib jobs on a node with one GPU: the second waits for the first to give it back (before, a one-GPU
    node took no lease and every job ran on it at once: wrong tokens/s and MFU, maybe out of memory)."""
    import threading

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    one = DeviceSetup("gpu", 1, "bf16-mixed", "auto")
    got: list = []
    with claim_devices(one) as devices:
        assert devices == [0] and held(leases) == ["gpu0"]
        waiter = threading.Thread(target=lambda: got.append(claim_devices(one).__enter__()))
        waiter.start()
        waiter.join(0.2)
        assert got == []  # still waiting
    waiter.join(5)
    assert got == [[0]]


def test_a_ddp_run_under_a_parallel_launcher_leases_all_its_gpus_and_its_ranks_inherit_them(leases, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(placement, "parallel_jobs", lambda: 2)  # a joblib sweep of 2 jobs
    ddp = DeviceSetup("gpu", 2, "bf16-mixed", "ddp")
    with claim_devices(ddp) as first, claim_devices(ddp) as second:
        assert (first, second) == ([0, 1], [2, 3]) and held(leases) == ["gpu0", "gpu1", "gpu2", "gpu3"]
        monkeypatch.setenv("LOCAL_RANK", "1")  # a rank Lightning spawned: the parent's GPUs, no lock of its own
        with claim_devices(ddp) as rank:
            assert rank == [2, 3]
        monkeypatch.delenv("LOCAL_RANK")
    assert held(leases) == []
    monkeypatch.setattr(placement, "parallel_jobs", lambda: 1)
    with claim_devices(ddp) as alone:
        assert alone == 2 and held(leases) == []  # a DDP run alone on its node takes what it sees


def test_leases_are_keyed_by_the_physical_gpu_not_its_visible_index(tmp_path):
    """Job A sees only GPU B (CUDA_VISIBLE_DEVICES=1): its index 0 is B. Job B sees both: it must not take B's
    lock as "index 1 is free", nor be refused A's lock because A's index 0 is held."""
    a = GpuLease(1, lock_dir=tmp_path, poll_s=0.01, keys=["-GPU-bbbb"])
    assert a.indices == [0]
    b = GpuLease(2, lock_dir=tmp_path, poll_s=0.01, keys=["-GPU-aaaa", "-GPU-bbbb"])
    assert b.indices == [0]  # GPU aaaa, free although job A holds its own index 0
    import threading

    third: list = []
    t = threading.Thread(target=lambda: third.append(GpuLease(2, lock_dir=tmp_path, poll_s=0.01,
                                                              keys=["-GPU-aaaa", "-GPU-bbbb"])))
    t.start()
    t.join(0.3)
    assert third == []  # both physical GPUs are held: it waits
    a.release()
    t.join(5)
    assert third[0].indices == [1]  # GPU bbbb, once job A gave it back
    third[0].release()
    b.release()


def test_the_gpu_lease_is_released_on_every_path(leases):
    with pytest.raises(RuntimeError), claim_devices(DeviceSetup("gpu", 1, "bf16-mixed", "auto")):
        assert held(leases) == ["gpu0"]
        raise RuntimeError("the run failed")
    assert held(leases) == []


# ---- precision: bf16 from compute capability 8.0 (Ampere) on -----------------------------------------------


@pytest.mark.parametrize(("capabilities", "precision"), [
    ([(8, 0), (8, 0)], "bf16-mixed"), ([(9, 0), (9, 0)], "bf16-mixed"),
    ([(7, 0), (7, 0)], "16-mixed"),  # V100: torch.cuda.is_bf16_supported() says True (emulation)
    ([(7, 5), (7, 5)], "16-mixed"),  # T4
    ([(8, 6), (7, 5)], "16-mixed"),  # a mixed node: what every GPU of it can do
])
def test_bf16_only_from_compute_capability_8(two_gpus, monkeypatch, capabilities, precision):
    asked = []

    def capability(device=None):
        asked.append(device)
        return capabilities[device]

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90"])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("the probe must not touch GPU 0"))
    assert resolve_device_setup(TrainerConfig(max_steps=1)).precision == precision
    assert sorted(asked) == [0, 1]  # a device-properties query of each GPU (no tensor, no context)
    assert resolve_device_setup(TrainerConfig(max_steps=1, precision="bf16")).precision == "bf16-mixed"  # as asked


# ---- a GPU asked for where CUDA sees none: one line that says why --------------------------------------------


def test_a_cpu_build_of_torch_is_named(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ConfigError) as e:
        resolve_accelerator("gpu")
    message = str(e.value)
    assert "\n" not in message and message.startswith("trainer.accelerator=gpu: no CUDA GPU is visible here")
    assert f"torch {torch.__version__} is a CPU-only build" in message and "--index-url" in message


@pytest.mark.parametrize(("driver", "wheel"), [("535.104.05", "cu126"), ("470.82.01", None), (None, None)])
def test_a_driver_too_old_for_the_wheel_is_named(no_gpu, monkeypatch, driver, wheel):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(placement, "nvidia_driver_version", lambda: driver)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ConfigError) as e:
        resolve_accelerator("gpu")
    message = str(e.value)
    assert "\n" not in message and "built for CUDA 13.0" in message
    if driver:
        assert f"NVIDIA driver {driver}" in message and "needs driver ≥ 580" in message
        assert f"download.pytorch.org/whl/{wheel}" in message if wheel else "update the NVIDIA driver" in message
    else:
        assert "no NVIDIA driver" in message


def test_hidden_gpus_are_named(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES is empty"):
        resolve_accelerator("gpu")


def test_a_wheel_without_kernels_for_the_gpu_is_named(two_gpus, monkeypatch):
    """The CUDA 13 wheels have no Volta kernels: CUDA sees the V100, but nothing would run on it."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(ConfigError, match=r"no kernels for Tesla V100-SXM2-32GB \(compute capability 7\.0\).*cu126"):
        resolve_device_setup(TrainerConfig(max_steps=1))


def test_gpu_experiments_ask_for_a_gpu(no_gpu, monkeypatch, tmp_path):
    """The GPU-sized experiments never fall back to the CPU silently: trainer=auto would, so they ask for a GPU."""
    from ffnbench.config.compose import compose
    from ffnbench.train import check_run

    monkeypatch.setattr(torch.version, "cuda", None)
    for experiment in ("activations", "full"):
        cfg = compose([f"experiment={experiment}", f"run_dir={tmp_path}"])
        assert cfg.trainer.accelerator == "gpu"
        with pytest.raises(ConfigError, match=r"^trainer\.accelerator=gpu: no CUDA GPU is visible here \(.*CPU-only"):
            check_run(cfg)
    assert compose(["experiment=quick"]).trainer.accelerator == "auto"  # the CPU-sized one runs anywhere


def test_the_gpu_claim_experiments_compile():
    for name in ("activations", "widths", "sparsity", "bias", "depth", "linear", "lr", "scale", "full"):
        assert compose([f"experiment={name}"]).trainer.compile is True, name
    assert compose(["experiment=quick"]).trainer.compile is False  # the CPU-sized one: compiling does not pay


def test_one_job_at_a_time_outside_a_joblib_sweep():
    assert parallel_jobs() == 1
