"""Throughput and MFU: the GPU peak table, a CPU probe cache that keeps its best reading, and the monitor's
tokens/s and MFU against their formulas, on a fake clock."""

import json
from types import SimpleNamespace

import pytest
import torch

from ffnbench.training import throughput
from ffnbench.training.readout import Readout
from ffnbench.training.throughput import ThroughputMonitor, cpu_peak_flops, gpu_peak_flops


@pytest.mark.parametrize(
    ("name", "precision", "peak"),
    [("NVIDIA H100 80GB HBM3", "bf16-mixed", 989e12), ("NVIDIA H100 PCIe", "bf16-mixed", 756e12),
     ("NVIDIA H100 NVL", "bf16-mixed", 835e12), ("NVIDIA H200", "bf16-mixed", 989e12),
     ("NVIDIA H200 NVL", "bf16-mixed", 835e12), ("NVIDIA GH200 480GB", "bf16-mixed", 989e12),
     ("NVIDIA H800", "bf16-mixed", 989e12), ("NVIDIA H800 PCIe", "bf16-mixed", 756e12),
     ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312e12), ("NVIDIA A100 80GB PCIe", "16-mixed", 312e12),
     ("NVIDIA A100-SXM4-80GB", "32-true", 156e12), ("NVIDIA L40S", "bf16-mixed", 362e12),
     ("NVIDIA RTX A6000", "bf16-mixed", 154.8e12), ("NVIDIA A40", "bf16-mixed", 149.7e12),
     ("NVIDIA RTX 6000 Ada Generation", "bf16-mixed", 364.2e12), ("NVIDIA A10G", "bf16-mixed", 70e12),
     ("Tesla V100-SXM2-32GB", "16-mixed", 125e12), ("Tesla V100-SXM2-32GB", "bf16-mixed", None),  # emulated
     ("Tesla T4", "16-mixed", 65e12),
     ("NVIDIA RTX A1000", "bf16-mixed", None),  # not an A100
     ("Quadro RTX 6000", "bf16-mixed", None),  # Turing, not the RTX 6000 Ada
     ("NVIDIA L4", "bf16-mixed", 121e12), ("NVIDIA L40", "bf16-mixed", 181e12),
     ("Some Future GPU", "bf16-mixed", None)],
)
def test_gpu_table(name, precision, peak):
    assert gpu_peak_flops(name, precision) == peak


def test_cpu_probe_is_cached_and_keeps_the_best_reading(tmp_path, monkeypatch):
    readings = iter([100e9, 80e9, 120e9])
    monkeypatch.setattr(throughput, "measure_cpu_peak_flops", lambda seconds=1.0: next(readings))
    assert cpu_peak_flops(tmp_path) == 100e9
    assert cpu_peak_flops(tmp_path) == 100e9  # a busy machine reads low: the cache keeps the best
    assert cpu_peak_flops(tmp_path) == 120e9
    assert list(json.loads((tmp_path / "peak_flops.json").read_text()).values()) == [120e9]


def test_a_damaged_probe_cache_is_measured_again(tmp_path, monkeypatch):
    (tmp_path / "peak_flops.json").write_text("{broken")
    monkeypatch.setattr(throughput, "measure_cpu_peak_flops", lambda seconds=1.0: 50e9)
    assert cpu_peak_flops(tmp_path) == 50e9


def test_configured_peak_wins():
    assert throughput.peak_flops("cpu", "32-true", 1e12, None) == (1e12, "config (trainer.peak_flops)")


def test_every_gpu_row_is_reachable_by_its_own_name():
    """Rows match whole words of the device name and the longest match wins: each row's own name finds it (a
    row that a shorter one hid, like GH200 behind H200 before, would fail here), and names are unique."""
    names = [name for name, *_ in throughput.GPU_PEAK_FLOPS]
    assert len({n.lower() for n in names}) == len(names)
    for name, bf16, fp16, fp32 in throughput.GPU_PEAK_FLOPS:
        assert gpu_peak_flops(f"NVIDIA {name}", "16-mixed") == fp16, name
        assert gpu_peak_flops(f"NVIDIA {name}", "bf16-mixed") == bf16, name
        assert gpu_peak_flops(f"NVIDIA {name}", "32-true") == fp32, name


# ---- ThroughputMonitor, driven through its Lightning hooks with a fake trainer and a fake clock ---------------

TOKENS_PER_STEP, FLOPS_PER_TOKEN, PEAK, WORLD = 128, 1000.0, 1e6, 2


class Clock:
    """Seconds that move only when the test says so (binary fractions: every sum below is exact)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Module:
    """The LightningModule side: what the monitor logs."""

    def __init__(self):
        self.logged: list[tuple[int, dict]] = []
        self.trainer = None

    def log_step(self, metrics):
        self.logged.append((self.trainer.global_step, Readout(metrics).read()))  # read at once, as on a CPU


class Run:
    """A fake trainer and the hook order Lightning follows: batch start, (work), global_step += 1 (the optimizer
    step), batch end; validation after a batch end; train end."""

    def __init__(self, monitor, max_steps, start_step=0):
        self.monitor, self.clock, self.module = monitor, monitor.clock, Module()
        self.trainer = SimpleNamespace(global_step=start_step, max_steps=max_steps,
                                       strategy=SimpleNamespace(root_device=torch.device("cpu")))
        self.module.trainer = self.trainer
        monitor.on_train_start(self.trainer, self.module)

    def steps(self, n, seconds_each):
        for _ in range(n):
            self.monitor.on_train_batch_start(self.trainer, self.module, None, 0)
            self.clock.now += seconds_each
            self.trainer.global_step += 1
            self.monitor.on_train_batch_end(self.trainer, self.module, None, None, 0)

    def validate(self, seconds):
        self.monitor.on_validation_start(self.trainer, self.module)
        self.clock.now += seconds

    def end(self):
        self.monitor.on_train_end(self.trainer, self.module)
        return self.monitor.summary()


def monitor(peak=PEAK, **kwargs):
    return ThroughputMonitor(TOKENS_PER_STEP, FLOPS_PER_TOKEN, peak, WORLD, clock=Clock(), **kwargs)


def test_throughput_and_mfu_are_the_formula_over_the_timed_steps_only():
    run = Run(monitor(skip_steps=5, log_every=10), max_steps=100)
    run.steps(5, seconds_each=10.0)  # warm-up (compile, caches): not timed
    run.steps(5, seconds_each=0.5)
    run.validate(seconds=100.0)  # not timed
    run.steps(10, seconds_each=0.25)
    summary = run.end()

    steps, seconds = 20 - 5, 5 * 0.5 + 10 * 0.25
    tokens_per_s = TOKENS_PER_STEP * steps / seconds
    assert summary == {
        "tokens_per_s": tokens_per_s,
        "mfu": FLOPS_PER_TOKEN * tokens_per_s / (PEAK * WORLD),
        "measured_steps": steps,
        "measured_seconds": seconds,
        "skipped_warmup_steps": 5,
        "peak_flops": PEAK,
        "flops_per_token": FLOPS_PER_TOKEN,
        "peak_source": None,
    }
    # Each log covers the steps since the previous one: steps 6-10 at 0.5 s, then 11-20 at 0.25 s.
    window = lambda n, s: {"perf/tokens_per_s": TOKENS_PER_STEP * n / s,
                           "perf/mfu": FLOPS_PER_TOKEN * (TOKENS_PER_STEP * n / s) / (PEAK * WORLD)}
    assert run.module.logged == [(10, window(5, 2.5)), (20, window(10, 2.5))]


class LaggingEvents:
    """An EventClock whose device runs one batch behind the host: while the host queues a batch, the device works on
    the one before, so the marks made since the latest batch began (`queued`) are not passed yet. Asking the seconds
    up to a mark the device has not passed is a wait for the device with nothing else queued: a stall."""

    def __init__(self, clock: Clock):
        self.clock, self.times, self.passed, self.stalls = clock, [], 0, 0
        self._latest = 0

    def mark(self) -> int:
        self.times.append(self.clock.now)
        return len(self.times) - 1

    def queued(self) -> None:
        """The host queued a batch: the device is past every mark made before that batch began."""
        self.passed, self._latest = self._latest, len(self.times)

    def seconds(self, start: int, end: int) -> float:
        self.stalls += end >= self.passed
        return self.times[end] - self.times[start]


def test_with_device_events_no_window_waits_for_the_device_and_the_figures_are_the_same():
    # The GPU path (EventClock) on a fake device one batch behind: each row is read once the next batch is queued, as
    # LMModule does where reads are deferred. The figures equal the host clock's, and no read waits for the device.
    host = Run(monitor(skip_steps=5, log_every=10), max_steps=100)
    clock = Clock()
    events = LaggingEvents(clock)
    deferred = ThroughputMonitor(TOKENS_PER_STEP, FLOPS_PER_TOKEN, PEAK, WORLD, skip_steps=5, log_every=10,
                                 clock=clock, marks=events)
    lagging = Run(deferred, max_steps=100)
    pending: list[tuple[int, Readout]] = []
    lagging.module.log_step = lambda metrics: pending.append((lagging.trainer.global_step, Readout(metrics)))
    read: list[tuple[int, dict]] = []
    for run in (host, lagging):
        for _ in range(30):
            events.mark()  # where the batch begins (on the device's queue)
            run.steps(1, seconds_each=0.5 if run.trainer.global_step < 15 else 0.25)
            events.queued()  # its steps are queued: the rows of the batches before it are read now
            read.extend((step, row.read()) for step, row in pending if step < run.trainer.global_step)
            pending[:] = [(step, row) for step, row in pending if step >= run.trainer.global_step]
    assert events.stalls == 0
    events.passed = len(events.times)  # the end of training: the device is done
    read.extend((step, row.read()) for step, row in pending)
    assert lagging.end() == host.end()
    assert read == host.module.logged and [step for step, _ in read] == [10, 20, 30]


def test_without_a_peak_there_is_no_mfu():
    run = Run(monitor(peak=None, skip_steps=1, log_every=4), max_steps=100)
    run.steps(4, seconds_each=1.0)
    summary = run.end()
    assert summary["mfu"] is None and summary["tokens_per_s"] == TOKENS_PER_STEP * 3 / 3.0
    assert run.module.logged == [(4, {"perf/tokens_per_s": TOKENS_PER_STEP * 3 / 3.0})]


def test_a_resumed_run_times_only_its_own_steps():
    run = Run(monitor(skip_steps=5), max_steps=100, start_step=50)  # restored from a step-50 checkpoint
    run.steps(5, seconds_each=10.0)
    run.steps(4, seconds_each=0.5)
    summary = run.end()
    assert (summary["measured_steps"], summary["measured_seconds"], summary["skipped_warmup_steps"]) == (4, 2.0, 5)
    assert summary["tokens_per_s"] == TOKENS_PER_STEP * 4 / 2.0


def test_a_short_run_skips_a_quarter_of_its_steps():
    run = Run(monitor(skip_steps=5), max_steps=8)
    run.steps(2, seconds_each=10.0)  # min(5, 8 // 4) = 2 warm-up steps
    run.steps(6, seconds_each=0.5)
    summary = run.end()
    assert (summary["skipped_warmup_steps"], summary["measured_steps"], summary["measured_seconds"]) == (2, 6, 3.0)


def test_a_run_too_short_to_time_records_nothing():
    run = Run(monitor(skip_steps=5), max_steps=1)
    run.steps(1, seconds_each=1.0)  # the only step is the warm-up
    summary = run.end()
    assert summary == {"tokens_per_s": None, "mfu": None, "measured_steps": 0, "measured_seconds": 0.0,
                       "peak_flops": PEAK, "peak_source": None}
    assert run.module.logged == []
