"""Numbers read back from the device without stalling it.

On a GPU, `.item()` (or `float()`, `.tolist()`) waits for every kernel queued before it: the host stops feeding the
device until the queue drains, and the next kernels start late. A `Readout` instead copies its tensors into pinned
host memory with one non-blocking copy and records an event after it; the values are read later (LMModule: at the
end of the next batch, once that batch's steps are queued behind the event), so the host waits at most for the device
to reach the event while the device still has work queued: the queue never drains. On a CPU
there is no queue to drain and nothing to defer: `defers(device)` is False and a Readout is read at once.

Every rank of a DDP run reads its readouts at the same point of its loop, so a decision made from one (stop, diverge)
is taken at the same step on every rank."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

DEFER_ENV = "FFNBENCH_DEFER_READS"  # "1": defer on any device (tests show the GPU path on a CPU); "0": never


def defers(device: torch.device | str) -> bool:
    """Whether reads of values on `device` are deferred: on a GPU, unless FFNBENCH_DEFER_READS says otherwise."""
    setting = os.environ.get(DEFER_ENV, "")
    if setting in ("0", "1"):
        return setting == "1"
    return torch.device(device).type == "cuda"


class Readout:
    """A set of named values to read on the host: 0-d tensors (copied without blocking), numbers (kept), and
    callables (called at `read()`, for figures that need the device to have got there first, such as the
    ThroughputMonitor's timings). `read()` returns name → number, each tensor exactly as `.item()` gives it; a
    name whose value (or callable's) is None is left out."""

    def __init__(self, values: Mapping[str, torch.Tensor | float | int | Callable[[], Any] | None]):
        self._order = list(values)
        self._names = [k for k, v in values.items() if isinstance(v, torch.Tensor)]
        self._other = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)}
        self._host: torch.Tensor | None = None
        self._event: Any = None
        if self._names:
            # float64 holds every float32/bf16/fp16 value and int up to 2**53 exactly: one copy for all of them
            stacked = torch.stack([values[k].detach().reshape(()).to(torch.float64) for k in self._names])
            if stacked.device.type == "cuda":
                self._host = torch.empty(stacked.shape, dtype=torch.float64, pin_memory=True)
                self._host.copy_(stacked, non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record()
            else:
                self._host = stacked.cpu()

    def ready(self) -> bool:
        """Whether `read()` would return without waiting for the device."""
        return self._event is None or self._event.query()

    def read(self) -> dict[str, Any]:
        if self._event is not None:
            self._event.synchronize()  # read a batch later, with work queued behind it: no drain
        numbers = self._host.numpy().tolist() if self._host is not None else []
        out = dict(zip(self._names, numbers, strict=True))
        for k, v in self._other.items():
            out[k] = v() if callable(v) else v
        return {k: out[k] for k in self._order if out[k] is not None}
