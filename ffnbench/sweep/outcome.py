"""What a sweep's runs say once it ends: a table of each run's result, and the runs counted by status."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ffnbench.fileio import CorruptRecord
from ffnbench.runs.result import RunResult
from ffnbench.runs.rundir import lock_holder
from ffnbench.sweep.planning import PlannedRun


def print_outcome(runs: list[PlannedRun], console: Console, refused: Mapping[Path, str] | None = None
                  ) -> dict[str, int]:
    """A table of what each run's result.json says now, and the runs counted by status (returned). `refused`: why
    each run refused before it started did (it has no folder, so no result.json to say it): shown as "refused",
    with its reason below the table, not as "missing"."""
    refused = refused or {}
    table = Table(title="sweep summary")
    for col in ("run", "was", "status", "val loss", "tokens", "wall s"):
        table.add_column(col, justify="left" if col in ("run", "was", "status") else "right")
    counts: dict[str, int] = {}
    tokens = wall = 0.0
    for r in runs:
        try:
            result = RunResult.read(r.run_dir)
            status = result.status if result else ("refused" if r.run_dir in refused else "missing")
        except CorruptRecord:
            result, status = None, "corrupt"
        if lock_holder(r.run_dir) is not None:  # another launch trains it now
            status = "running"
        counts[status] = counts.get(status, 0) + 1
        loss = result.metrics.get("final_val_loss") if result else None
        run_tokens = (result.tokens if result else None) or 0
        run_wall = (result.wall_time_s if result else None) or 0
        tokens += run_tokens
        wall += run_wall
        table.add_row(r.run_dir.name, r.action, status, f"{loss:.4f}" if loss is not None else "-",
                      f"{run_tokens:,}", f"{run_wall:.0f}")
    console.print(table)
    console.print("runs by status: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                  + f"; {tokens:,.0f} tokens; {wall:.0f} s of training wall time")
    shown = [(d, why) for d, why in refused.items() if any(r.run_dir == d for r in runs)]
    for run_dir, why in shown:
        print(f"refused before it started (no run folder): {run_dir.name}: {why}")
    return counts
