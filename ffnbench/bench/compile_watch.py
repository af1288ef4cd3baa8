"""What dynamo did in a compiled run, as gpu-check judges it: whether every block ran compiled (no graph break, no
frame dynamo gave up on), whether anything compiled after warm-up, whether a graph has a symbolic (dynamic) shape,
and whether a compiled function compiled more than its one training graph (result.json's `compile`: validation runs
eager). Read from dynamo's counters and torch's compilation records, on any device."""

from __future__ import annotations

import re
from typing import Any


def dynamo_snapshot() -> dict[str, Any]:
    """What torch._dynamo has counted so far in this process (the counters only grow; compare two snapshots)."""
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "frames": counters["frames"]["total"],
            "frames_ok": counters["frames"]["ok"], "graph_breaks": dict(counters["graph_break"]),
            "unimplemented": dict(counters["unimplemented"])}


def compile_problems(start: dict[str, Any], warm: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """What went wrong with compilation between three dynamo snapshots (dynamo_snapshot): the run's start, the end of
    its warm-up, its end. Empty when every compiled frame ran as a graph and nothing was compiled after warm-up.

    - nothing compiled at all: compile was asked for, so the blocks ran eager;
    - a graph break: part of a block ran eager between graphs;
    - a frame dynamo gave up on (an error, or the recompile limit hit): that frame ran eager from then on;
    - a graph compiled after warm-up: a recompile in the timed steps (its cost is in the measured throughput).
    """
    problems = []
    if end["graphs"] == start["graphs"]:
        problems.append("nothing was compiled: every block ran eager")
    breaks = {k: v - start["graph_breaks"].get(k, 0) for k, v in end["graph_breaks"].items()}
    breaks = {k: v for k, v in breaks.items() if v > 0}
    if breaks:
        problems.append(f"{sum(breaks.values())} graph break(s), part of a block ran eager: "
                        + "; ".join(f"{k[:120]} (×{v})" for k, v in breaks.items()))
    failed = (end["frames"] - start["frames"]) - (end["frames_ok"] - start["frames_ok"])
    if failed > 0:
        why = {k: v - start["unimplemented"].get(k, 0) for k, v in end["unimplemented"].items()}
        why_text = "; ".join(k[:120] for k, v in why.items() if v > 0)
        problems.append(f"{failed} frame(s) dynamo gave up on ran eager" + (f": {why_text}" if why_text else ""))
    late = end["graphs"] - warm["graphs"]
    if late > 0:
        problems.append(f"{late} graph(s) compiled after warm-up (a recompile in the timed steps)")
    return problems


def graph_problems(record: dict[str, Any] | None) -> list[str]:
    """A compiled function compiled more than once, read from a run's result.json `compile` record
    (compiling.CompileWatch.record): a run compiles each frame (the blocks' forward, the loss head's) once, for
    training, and evaluates eager (training.module.validation_step), so every further compilation is a graph the run
    compiled again (a new shape, a changed guard) and paid the compile time of. Judged frame by frame where the
    record counts them (`compiles_per_frame`), else on the run's totals (any recompile)."""
    if not record or not record.get("enabled"):
        return []
    per_frame = record.get("compiles_per_frame")
    if isinstance(per_frame, list) and per_frame:
        over = [n for n in per_frame if n > 1]
        if over:
            return [f"{len(over)} of {len(per_frame)} compiled functions compiled {', '.join(map(str, over))} times "
                    f"(result.json's compile.compiles_per_frame {per_frame}): more than one training graph each"]
        return []
    frames, recompiles, graphs = record.get("frames"), record.get("recompiles"), record.get("graphs")
    if not isinstance(frames, int) or not isinstance(recompiles, int) or not isinstance(graphs, int):
        return []  # a record without the counts (an older torch): nothing to judge
    functions = frames - recompiles
    if functions > 0 and (recompiles > 0 or graphs > functions):
        return [f"{graphs} graphs and {recompiles} recompiles for {functions} compiled function(s) (result.json's "
                f"compile): more than one training graph per function"]
    return []


# torch's compilation records (torch._dynamo.utils.get_compilation_metrics): a symbolic size in a graph's node shapes
# ("s0", "s77"; "u0" unbacked) is a graph compiled with dynamic shapes
_SYMBOL = re.compile(r"'[su]\d+'")


def compilations(since: set[int]) -> list[Any]:
    """torch's compilation records made since `since` (the ids of the records present then)."""
    from torch._dynamo.utils import get_compilation_metrics

    return [m for m in get_compilation_metrics() if id(m) not in since]


def compilation_ids() -> set[int]:
    from torch._dynamo.utils import get_compilation_metrics, set_compilation_metrics_limit

    set_compilation_metrics_limit(1024)  # torch keeps the last 64 by default; a run makes a handful
    return {id(m) for m in get_compilation_metrics()}


def compile_summary(records: list[Any], first_step_end: float | None) -> dict[str, Any]:
    """What torch's compilation records of one run say: how many compilations (forward and backward graphs), their
    seconds in all and after the first training step, and how many had a symbolic (dynamic) shape."""
    def seconds(m) -> float:
        return (m.duration_us or 0) / 1e6

    dynamic = [m for m in records if m.graph_node_shapes and _SYMBOL.search(str(m.graph_node_shapes))]
    late = [m for m in records if first_step_end is not None and (m.start_time_us or 0) / 1e6 > first_step_end]
    return {"compilations": len(records), "seconds": sum(map(seconds, records)),
            "seconds_after_first_step": sum(map(seconds, late)), "dynamic_graphs": len(dynamic),
            "dynamic_where": sorted({f"{m.co_name} ({m.compile_id})" for m in dynamic})}


def dynamo_watch(warmup_steps: int):
    """A Lightning callback that snapshots dynamo's counters at the start of fit, after `warmup_steps` optimizer
    steps and at the end of fit (validation after it excluded); `problems()` judges them."""
    import lightning as L

    class DynamoWatch(L.Callback):
        def __init__(self) -> None:
            self.snapshots: dict[str, dict[str, Any]] = {}

        def on_train_start(self, trainer, pl_module) -> None:
            self.snapshots["start"] = dynamo_snapshot()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step >= warmup_steps and "warm" not in self.snapshots:  # at a batch's end
                self.snapshots["warm"] = dynamo_snapshot()

        def on_train_end(self, trainer, pl_module) -> None:
            self.snapshots["end"] = dynamo_snapshot()
            self.snapshots.setdefault("warm", self.snapshots["end"])  # a run shorter than its warm-up

        def problems(self) -> list[str]:
            if set(self.snapshots) != {"start", "warm", "end"}:
                return ["the run did not train (no snapshot of dynamo's counters)"]
            return compile_problems(self.snapshots["start"], self.snapshots["warm"], self.snapshots["end"])

    return DynamoWatch()
