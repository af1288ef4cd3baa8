"""How long a sweep has left: each planned run's training FLOPs, known from its config before it runs, over the
FLOP rate the sweep's most recently finished runs reached (their training FLOPs ÷ their wall time: this machine,
under its present load, validation and start-up included; runs slowed by a load that has since gone, or sped up by
one that came, stop counting after RECENT_RUNS more). `make sweep` prints it when it starts, and every run it launches
prints it again when it starts (the progress line), so a campaign interrupted and resumed any number of times
always says what is left."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ffnbench.config.schema import RunSpec
from ffnbench.fileio import CorruptRecord, read_json
from ffnbench.model.accounting import count_flops
from ffnbench.runs.result import FINAL_STATUSES, RunResult
from ffnbench.runs.rundir import SWEEP_MANIFEST

RECENT_RUNS = 10  # the finished runs the rate is taken over, the most recent first
SWEEP_ENV = "FFNBENCH_SWEEP"  # set by `make sweep` for the runs it launches: their sweep directory


def planned_flops(spec: RunSpec, batch_size: int) -> float:
    """The training FLOPs a run asks for (forward + backward per token × tokens), known before it runs.

    Args:
        spec: the run's settings (config.schema.run_spec): its model and its budget.
        batch_size: the sequences of one optimizer step (data.batch_size).
    """
    tokens_per_step = batch_size * spec.model.seq_len
    return float(count_flops(spec.model).training * spec.total_steps(tokens_per_step) * tokens_per_step)


@dataclass(frozen=True)
class Estimate:
    done: int  # runs with a final status (finished or diverged)
    total: int
    seconds_left: float | None  # None until a run has finished here
    rate: float | None  # FLOP/s of the most recently finished runs, wall time included
    based_on: int  # how many finished runs the rate comes from (at most RECENT_RUNS)

    def line(self) -> str:
        head = f"{self.done} of {self.total} runs done"
        if self.done == self.total:
            return head
        if self.seconds_left is None:
            return f"{head}; time left: unknown until a run of this sweep finishes here"
        return (f"{head}; about {_duration(self.seconds_left)} left (at the {self.rate / 1e9:.3g} GFLOP/s of wall "
                f"time its {self.based_on} most recently finished run{'s' if self.based_on != 1 else ''} reached)")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate(runs: Sequence[tuple[Path, float | None]]) -> Estimate:
    """`runs`: (run directory, planned FLOPs) of every run of the sweep. A run's FLOPs count as left until it
    has a final status (a resumed run's done part is not subtracted: a slight overestimate). The rate is the recent
    runs' FLOPs over the wall-clock time they covered together (the union of their [start, end] intervals), so runs
    trained side by side (joblib's jobs, a SLURM array) count as the parallel sweep they are, and a pause between
    runs (an interrupted campaign) does not count at all."""
    done, left = 0, 0.0
    timed: list[tuple[float, float, float]] = []  # (finished at, FLOPs, seconds) of each finished run
    for run_dir, flops in runs:
        try:
            result = RunResult.read(run_dir)
        except CorruptRecord:
            result = None
        if result is not None and result.status in FINAL_STATUSES:
            done += 1
            trained = _flops_of_last_segment(result)
            if result.status == "finished" and trained and result.wall_time_s:
                timed.append((_epoch(result.finished_at), trained, float(result.wall_time_s)))
        elif flops:
            left += flops
    recent = sorted(timed)[-RECENT_RUNS:]
    placed = [(end - wall, end) for end, _, wall in recent if math.isfinite(end)]
    seconds = _covered(placed) + sum(wall for end, _, wall in recent if not math.isfinite(end))  # no time: alone
    rate = sum(t[1] for t in recent) / seconds if seconds else None
    return Estimate(done, len(runs), left / rate if rate else None, rate, len(recent))


def _covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end] intervals."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if start > reach:
            total += end - start
        elif end > reach:
            total += end - reach
        reach = max(reach, end)
    return total


def _epoch(finished_at: str | None) -> float:
    """Seconds since the epoch of a result's finished_at (local time with its UTC offset: runs of one sweep may come
    from machines in other time zones, or from both sides of a clock change); -inf when missing or unreadable."""
    try:
        return datetime.strptime(finished_at, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (TypeError, ValueError):
        return -math.inf


def _flops_of_last_segment(result: RunResult) -> float | None:
    """The training FLOPs of the steps the run's last process trained: its wall time covers only those (a
    resumed run's earlier segments were timed by earlier processes)."""
    per_token = (result.flops or {}).get("per_token_training")
    if not (per_token and result.steps and result.tokens_per_step):
        return None
    steps = result.steps - (result.resumed_from_step or 0)
    return float(per_token) * steps * result.tokens_per_step if steps > 0 else None


def manifest_runs(sweep_dir: Path) -> list[tuple[Path, float | None]]:
    """(run directory, planned FLOPs) of every run the sweep's manifest lists."""
    manifest = read_json(sweep_dir / SWEEP_MANIFEST)
    flops = manifest.get("flops") or [None] * len(manifest["runs"])
    return [(Path(d), f) for d, f in zip(manifest["runs"], flops)]


def progress_line() -> str | None:
    """The progress line of the sweep this process was launched by (SWEEP_ENV), or None outside a sweep."""
    sweep_dir = os.environ.get(SWEEP_ENV)
    if not sweep_dir:
        return None
    try:
        return "sweep progress: " + estimate(manifest_runs(Path(sweep_dir))).line()
    except (OSError, CorruptRecord, KeyError):
        return None  # a missing or unreadable manifest costs the progress line, never the run
