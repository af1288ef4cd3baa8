"""torch.compile across the runs of one process: each run starts from an empty dynamo cache, and records what
dynamo did with its blocks (result.json's `compile`).

The basic and joblib launchers train many configs in one process. All blocks of all runs share one code object
(Block.forward), so without a reset every run adds its graphs to one cache entry until dynamo's recompile limit
(8) is hit, by the third or fourth variant; from then on the blocks run eager, and throughput, MFU and the
speed claim would mix compiled and eager runs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch


def _dynamo_state() -> tuple[Counter, Counter, Counter]:
    from torch._dynamo.utils import counters

    return Counter(counters["frames"]), Counter(counters["stats"]), Counter(counters["graph_break"])


class CompileWatch:
    """Made before a run builds its model: empties dynamo's caches when the run compiles; `record()` at the end."""

    def __init__(self, enabled: bool):
        """Args:
            enabled: whether the run compiles its blocks (trainer.compile)."""
        self.enabled = bool(enabled)
        if self.enabled:
            torch._dynamo.reset()  # as if a new process: the previous runs' graphs and guards go
        self._start = _dynamo_state()

    def record(self) -> dict[str, Any]:
        """{"enabled": False} for an eager run; else what dynamo did since the run started:
        compiled: every frame dynamo was handed was compiled (none fell back to eager);
        frames: frames compiled; eager_frames: frames that fell back to eager (a recompile limit hit, an error);
        graphs: graphs captured; graph_breaks: breaks inside them; recompiles: compilations of a frame already
        compiled once; compiles_per_frame: the compilations of each frame (the blocks' forward, the loss head), in the
        order dynamo met them. A run compiles each frame once, its training graph (validation runs eager:
        training.module.validation_step). More is a recompile that costs a run time (a new shape, a changed guard):
        `make gpu-check` fails such a run."""
        if not self.enabled:
            return {"enabled": False}
        (frames, stats, breaks), (frames0, stats0, breaks0) = _dynamo_state(), self._start
        frames, stats, breaks = frames - frames0, stats - stats0, breaks - breaks0
        from torch._dynamo import convert_frame

        per_frame = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)  # compilations per frame since the reset
        return {
            "enabled": True,
            "compiled": frames["total"] > 0 and frames["ok"] == frames["total"],
            "frames": frames["ok"],
            "eager_frames": frames["total"] - frames["ok"],
            "graphs": stats["unique_graphs"],
            "graph_breaks": sum(breaks.values()),
            "recompiles": sum(per_frame.values()) - len(per_frame) if per_frame is not None else None,
            "compiles_per_frame": list(per_frame.values()) if per_frame is not None else None,
        }
