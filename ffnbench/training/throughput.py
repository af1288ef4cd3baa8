"""Throughput and MFU: the peak FLOP/s of the device, and a callback that times training steps only.

MFU = achieved model FLOP/s ÷ peak FLOP/s, with the model FLOPs of accounting.count_flops (6·N plus the
attention term), so it is comparable across FFN variants of different cost."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch

from ffnbench.fileio import CorruptRecord, read_json, write_json_atomic
from ffnbench.runs.provenance import cpu_model
from ffnbench.training.readout import defers

# Dense (no sparsity) peak FLOP/s per device, from the vendors' datasheets (which print the sparse figure first:
# these are half of it): (model name, bf16, fp16, tf32 — or fp32 where there are no TF32 tensor cores), tensor
# cores with fp32 accumulation; None where the precision has no tensor cores (V100 and T4 emulate bf16).
# Lightning's own table misses some of these (H200, L40S). A row matches a device name whose words (letters and
# digits) contain the row's words in order, and the row with the most words wins: "H100 NVL" beats "H100",
# "RTX A1000" is not "A100", "GH200" is its own word, "Quadro RTX 6000" (Turing) is not the "RTX 6000 Ada".
GPU_PEAK_FLOPS: list[tuple[str, float | None, float | None, float | None]] = [
    ("B200", 2250e12, 2250e12, 1100e12),
    ("H200", 989e12, 989e12, 494e12),  # SXM
    ("H200 NVL", 835e12, 835e12, 417.5e12),
    ("GH200", 989e12, 989e12, 494e12),
    ("H100", 989e12, 989e12, 494e12),  # SXM
    ("H100 PCIe", 756e12, 756e12, 378e12),
    ("H100 NVL", 835e12, 835e12, 417.5e12),
    ("H800", 989e12, 989e12, 494e12),  # SXM
    ("H800 PCIe", 756e12, 756e12, 378e12),
    ("A100", 312e12, 312e12, 156e12),
    ("A800", 312e12, 312e12, 156e12),
    ("L40S", 362e12, 362e12, 183e12),
    ("L40", 181e12, 181e12, 90.5e12),
    ("L4", 121e12, 121e12, 60e12),
    ("RTX 6000 Ada", 364.2e12, 364.2e12, 182.1e12),
    ("A6000", 154.8e12, 154.8e12, 77.4e12),  # RTX A6000
    ("A40", 149.7e12, 149.7e12, 74.8e12),
    ("A10G", 70e12, 70e12, 35e12),
    ("A10", 125e12, 125e12, 62.5e12),
    ("RTX 4090", 165e12, 165e12, 82.6e12),
    ("RTX 3090", 71e12, 71e12, 35.6e12),
    ("V100", None, 125e12, 15.7e12),  # SXM2; fp16 tensor cores, no bf16, no TF32
    ("T4", None, 65e12, 8.1e12),
]


def _words(name: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", name.lower())


def gpu_row(device_name: str) -> tuple | None:
    """The GPU_PEAK_FLOPS row of a device name (torch.cuda.get_device_name), None for a GPU not in the table."""
    words = _words(device_name)
    best = None
    for row in GPU_PEAK_FLOPS:
        key = _words(row[0])
        found = any(words[i:i + len(key)] == key for i in range(len(words) - len(key) + 1))
        if found and (best is None or len(key) > len(_words(best[0]))):
            best = row
    return best


def gpu_peak_flops(device_name: str, precision: str) -> float | None:
    """The dense peak FLOP/s of one GPU at a Lightning precision: bf16-*, 16-* (fp16) or 32-true (TF32 matmuls, as
    train() allows them on a GPU); None for a GPU not in the table or a precision without tensor cores there."""
    row = gpu_row(device_name)
    if row is None:
        return None
    _, bf16, fp16, fp32 = row
    if "bf16" in precision:
        return bf16
    if "16" in precision:
        return fp16
    return fp32 if precision.startswith("32") else None


def measure_cpu_peak_flops(size: int = 1024, seconds: float = 1.0) -> float:
    """The fp32 matmul throughput this CPU sustains with torch's current thread count: the best of several
    timed repeats of a size×size GEMM (large enough to be compute-bound)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        torch.mm(a, b)  # warm-up: thread pool, caches
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2 * size**3 / (time.perf_counter() - t0))
    return best


def cpu_peak_flops(cache_dir: Path | None) -> float:
    """Measured per (CPU model, thread count, torch version) and cached as JSON under cache_dir. A busy machine
    can only make the probe read low, so each call adds a short probe and the cache keeps the best reading."""
    key = f"{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}"
    path = Path(cache_dir) / "peak_flops.json" if cache_dir else None
    cached: dict[str, Any] = {}
    if path and path.exists():
        try:
            cached = read_json(path)
        except CorruptRecord:
            cached = {}  # a damaged cache is re-measured
    previous = cached.get(key) if isinstance(cached.get(key), int | float) else None
    fresh = measure_cpu_peak_flops(seconds=0.3 if previous else 1.0)
    peak = max(fresh, previous or 0.0)
    if path and peak != previous:
        write_json_atomic(path, {**cached, key: peak})
    return peak


def peak_flops(accelerator: str, precision: str, configured: float | None, cache_dir: Path | None) -> tuple:
    """(peak FLOP/s per device or None, where it came from)."""
    if configured:
        return float(configured), "config (trainer.peak_flops)"
    if accelerator == "gpu":
        name = torch.cuda.get_device_name()
        value = gpu_peak_flops(name, precision)
        if value:
            return value, f"table: {name} at {precision}"
        known = gpu_row(name) is not None
        return None, (f"no {precision} peak for {name} in the table" if known else f"unknown GPU {name!r}") + \
            ": set trainer.peak_flops"
    return cpu_peak_flops(cache_dir), "measured: fp32 matmul probe"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU): the edge of every timed stretch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class HostClock:
    """Marks in seconds on the host, each after the device's queued work (a sync: exact, and free on a CPU)."""

    def __init__(self, device: torch.device, clock: Callable[[], float] = time.perf_counter):
        self.device, self.clock = device, clock

    def mark(self) -> float:
        sync(self.device)
        return self.clock()

    def seconds(self, start: float, end: float) -> float:
        return end - start


class EventClock:
    """Marks as CUDA events on the current stream: recording one does not wait for the device, and the time between
    two is read once the device has passed the later one (a batch later, when the row that needs it is read)."""

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        end.synchronize()
        return start.elapsed_time(end) / 1000.0


class ThroughputMonitor(L.Callback):
    """Times training steps only: from the end of step `skip_steps` (compile and warm-up excluded) to the
    end of training, minus the time spent in validation. It sees the ends of batches (trainer.inner_steps steps
    each): timing starts at the first batch end at or after `skip_steps`, so a run of one batch has none. The edges of
    the timed stretches and of each logging window are marks of a clock: on a CPU, seconds on the host; where reads
    are deferred (a GPU: training.readout), CUDA events, so that timing never waits for the device, and a window's
    figures are worked out when its row is read (they go into the row as callables).

    Args:
        tokens_per_step: global tokens per optimizer step (batch_size · seq_len).
        flops_per_token: training FLOPs per token (accounting.count_flops(...).training).
        peak: peak FLOP/s of one device; None leaves MFU out.
        world_size: devices the run uses (MFU divides by the peak of all of them).
        skip_steps: warm-up steps left out of the timing (fewer in a short run: a quarter of it).
        log_every: log perf/tokens_per_s (and perf/mfu) every this many steps, over the steps since the last log.
        peak_source: where `peak` came from, recorded next to it.
        clock: seconds, monotonic, for the host clock; tests pass a fake one.
        marks: the clock to mark with (HostClock or EventClock); None chooses by device at the start of training.
    """

    def __init__(self, tokens_per_step: int, flops_per_token: float, peak: float | None, world_size: int,
                 skip_steps: int = 5, log_every: int = 10, peak_source: str | None = None,
                 clock: Callable[[], float] = time.perf_counter, marks: HostClock | EventClock | None = None):
        self.tokens_per_step = tokens_per_step
        self.flops_per_token = flops_per_token
        self.peak = peak
        self.peak_source = peak_source  # where the peak came from: the GPU table, the CPU probe, the config
        self.world_size = world_size
        self.skip_steps = skip_steps
        self.log_every = log_every
        self.clock = clock
        self.marks = marks
        self.start_step: int | None = None
        self._closed: list[tuple[Any, Any]] = []  # the timed stretches that ended (at a validation, at the end)
        self._seconds: list[float] = []  # their lengths, as far as read
        self._open: Any = None  # the mark that started the current timed stretch
        self._window: tuple[int, tuple] = (0, (0, None, None))  # (step, elapsed-at) of the last log
        self.fit_start = 0
        self.end_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.fit_start = trainer.global_step  # a resumed run times only its own steps
        if self.marks is None:
            device = trainer.strategy.root_device
            self.marks = EventClock() if device.type == "cuda" and defers(device) else HostClock(device, self.clock)

    def _at(self) -> tuple:
        """A point of the timed time, as (closed stretches so far, open stretch's start, a mark now): its seconds can
        be worked out later (`_elapsed`), once the device has got there."""
        return len(self._closed), self._open, (self.marks.mark() if self._open is not None else None)

    def _elapsed(self, at: tuple) -> float:
        n_closed, open_start, now = at
        while len(self._seconds) < n_closed:
            self._seconds.append(self.marks.seconds(*self._closed[len(self._seconds)]))
        total = 0.0
        for s in self._seconds[:n_closed]:
            total += s
        if open_start is not None:
            total += self.marks.seconds(open_start, now)
        return total

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start_step is not None and self._open is None:  # resume timing after a validation pause
            self._open = self.marks.mark()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.start_step is None:
            # Start timing after the warm-up steps; a short run measures from a quarter of the way in.
            done, total = step - self.fit_start, trainer.max_steps - self.fit_start
            if done >= min(self.skip_steps, max(1, total // 4)):
                self.start_step, self._open = step, self.marks.mark()
                self._window = (step, (0, self._open, self._open))  # no time yet
            return
        if step % self.log_every == 0 and step > self._window[0]:  # a batch that took no step logs nothing
            previous, self._window = self._window, (step, self._at())
            tokens = (step - previous[0]) * self.tokens_per_step
            window = _Window(self, tokens, previous[1], self._window[1])
            metrics: dict[str, Any] = {"perf/tokens_per_s": window.tokens_per_s}
            if self.peak:
                metrics["perf/mfu"] = window.mfu
            pl_module.log_step(metrics)  # into this logging step's row (LMModule.log_step), read with it

    def mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOP/s ÷ the peak of all devices (None without a peak)."""
        return tokens_per_s * self.flops_per_token / (self.peak * self.world_size) if self.peak else None

    def _pause(self) -> None:
        if self._open is not None:
            self._closed.append((self._open, self.marks.mark()))
            self._open = None

    def on_validation_start(self, trainer, pl_module) -> None:
        self._pause()

    def on_train_end(self, trainer, pl_module) -> None:
        self._pause()
        self.end_step = trainer.global_step

    def summary(self) -> dict[str, Any]:
        steps = self.end_step - (self.start_step or 0)
        elapsed = self._elapsed((len(self._closed), None, None)) if self.start_step is not None else 0.0
        if self.start_step is None or steps <= 0 or elapsed <= 0:
            return {"tokens_per_s": None, "mfu": None, "measured_steps": 0, "measured_seconds": 0.0,
                    "peak_flops": self.peak, "peak_source": self.peak_source}
        tps = steps * self.tokens_per_step / elapsed
        return {
            "tokens_per_s": tps,
            "mfu": self.mfu(tps),
            "measured_steps": steps,
            "measured_seconds": elapsed,
            "skipped_warmup_steps": self.start_step - self.fit_start,  # of this run's own steps
            "peak_flops": self.peak,
            "flops_per_token": self.flops_per_token,
            "peak_source": self.peak_source,
        }


class _Window:
    """One logging window's figures, worked out when first asked for (when its row is read): tokens over the timed
    seconds between two points of the monitor's clock. None where no time passed."""

    def __init__(self, monitor: ThroughputMonitor, tokens: int, start: tuple, end: tuple):
        self.monitor, self.tokens, self.start, self.end = monitor, tokens, start, end
        self._tps: float | None = None

    def tokens_per_s(self) -> float | None:
        if self._tps is None:
            seconds = self.monitor._elapsed(self.end) - self.monitor._elapsed(self.start)
            self._tps = self.tokens / seconds if seconds > 0 and self.tokens > 0 else None
        return self._tps

    def mfu(self) -> float | None:
        tps = self.tokens_per_s()
        return self.monitor.mfu(tps) if tps is not None else None
