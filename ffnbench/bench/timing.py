"""How the benchmarks measure: interleaved repetitions, paired ratios, the median and quartiles of a list of
timings, timed calls bracketed by device synchronisation, and how busy the rest of the machine was."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ffnbench.bench.session import BenchSession
from ffnbench.training.throughput import sync

# ---------------------------------------------------------------------------------------------------------
# Statistics of repeated measurements
# ---------------------------------------------------------------------------------------------------------


def quartiles(values: Sequence[float]) -> dict[str, float | int]:
    """Median, quartiles, IQR, min, max and count of a list of measurements (linear-interpolated quartiles):
    what every figure of the benchmark JSON files holds."""
    xs = np.asarray([float(v) for v in values], dtype=float)
    if xs.size == 0:
        raise ValueError("quartiles: no measurements")
    q1, median, q3 = (float(q) for q in np.percentile(xs, [25, 50, 75]))
    return {"median": median, "iqr": q3 - q1, "q1": q1, "q3": q3, "min": float(xs.min()), "max": float(xs.max()),
            "n": int(xs.size)}


def interleaved(trials: Mapping[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """Call every trial `reps` times, round-robin, reversing the order every other round (A B, B A, A B, ...), so
    that drift of the machine (clock, other load, caches) hits every trial alike. Each call returns one
    measurement; the lists come back in the order they were taken."""
    names = list(trials)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            out[name].append(float(trials[name]()))
    return out


def paired_ratios(num: Sequence[float], den: Sequence[float]) -> list[float]:
    """num[i] / den[i]: the ratio of two measurements taken side by side in repetition i."""
    if len(num) != len(den):
        raise ValueError("paired_ratios: the two lists differ in length")
    return [a / b for a, b in zip(num, den)]


# ---------------------------------------------------------------------------------------------------------
# Timed calls
# ---------------------------------------------------------------------------------------------------------


def time_call(fn: Callable[[], Any], device: torch.device, inner: int = 1,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of `fn`, over `inner` back-to-back calls, the device synchronized at both edges.

    Args:
        fn: what is timed; its result is discarded.
        device: synchronized before and after, so that a GPU's queued work is inside the timing.
        inner: calls per timing (averages out the clock's resolution on short calls).
        clock: seconds, monotonic (a fake one in the tests).
    """
    sync(device)
    start = clock()
    for _ in range(inner):
        fn()
    sync(device)
    return (clock() - start) / inner


class Trial:
    """Times `call`: `inner` back-to-back calls per repetition, after a warm-up whose first call (the one that
    compiles, when compiled) is kept apart in `first_call_s`."""

    session: BenchSession
    inner: int
    first_call_s: float | None = None

    def call(self) -> None:
        raise NotImplementedError

    def warm_up(self, calls: int = 3) -> None:
        self.first_call_s = time_call(self.call, self.session.device)
        for _ in range(calls - 1):
            self.call()

    def __call__(self) -> float:
        return time_call(self.call, self.session.device, self.inner)


class LayerTrial(Trial):
    """Forward + backward of one FFN layer over `n_tokens` tokens (weights' and input's gradients)."""

    def __init__(self, session: BenchSession, ffn: torch.nn.Module, n_tokens: int, d_model: int, inner: int,
                 compile: bool = False):
        gen = torch.Generator().manual_seed(0)
        self.session, self.inner, self.module = session, inner, ffn.to(session.device)
        self.fn = torch.compile(self.module) if compile else self.module
        self.x = torch.randn(n_tokens, d_model, generator=gen).to(session.device).requires_grad_(True)
        self.grad = torch.randn(n_tokens, d_model, generator=gen).to(session.device)

    def call(self) -> None:
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)
        with self.session.autocast():
            y = self.fn(self.x)
        if self.grad.dtype != y.dtype:
            self.grad = self.grad.to(y.dtype)
        y.backward(self.grad)


# ---------------------------------------------------------------------------------------------------------
# How busy the rest of the machine was
# ---------------------------------------------------------------------------------------------------------


def cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(all, idle) CPU time of the whole machine so far, in clock ticks (None where /proc/stat is unavailable).
    Idle counts iowait too."""
    try:
        fields = [int(v) for v in stat.read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    except (OSError, ValueError, IndexError):
        return None
    return sum(fields), idle


def cpu_busy_fraction(interval: float = 0.5) -> float | None:
    """Share of all CPU time that was busy over `interval` seconds (None where unavailable).
    Taken while the benchmark itself is idle, it says how much else is running."""
    a = cpu_ticks()
    time.sleep(interval)
    b = cpu_ticks()
    if a is None or b is None or b[0] == a[0]:
        return None
    return 1.0 - (b[1] - a[1]) / (b[0] - a[0])


def load_snapshot() -> dict[str, Any]:
    """The load average and the busy share of the CPU right now (each benchmark takes one before and after)."""
    try:
        loadavg = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        loadavg = None
    busy = cpu_busy_fraction()
    return {"loadavg": loadavg, "busy_fraction": None if busy is None else round(busy, 3)}


class LoadMeter:
    """How busy the rest of the machine was while a benchmark ran: all CPU time used (/proc/stat) minus this
    process's own (and its finished subprocesses'), as a share of the machine's capacity over the wall time."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        ticks = cpu_ticks()
        if ticks is None:
            return None
        busy = (ticks[0] - ticks[1]) / os.sysconf("SC_CLK_TCK")
        t = os.times()
        return time.perf_counter(), busy, t.user + t.system + t.children_user + t.children_system

    def read(self) -> dict[str, float] | None:
        end = self._read()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        wall = end[0] - self.start[0]
        others = max(0.0, (end[1] - self.start[1]) - (end[2] - self.start[2]))
        return {"wall_s": round(wall, 1), "others_cpu_s": round(others, 1),
                "others_busy_fraction": round(others / (wall * (os.cpu_count() or 1)), 4)}
