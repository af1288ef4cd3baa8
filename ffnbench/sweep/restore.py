"""`--restore`: a published results.jsonl put back into a sweep's run directories, so that its finished runs
plan as done (a campaign resumed on another machine)."""

from __future__ import annotations

import json
from pathlib import Path

from ffnbench.errors import ConfigError
from ffnbench.fileio import CorruptRecord, write_json_atomic
from ffnbench.runs.result import FINAL_STATUSES, RunResult


def restore(results: Path, sweep_dir: Path) -> int:
    """Write each finished or diverged record of a published results.jsonl back as <sweep_dir>/<run name>/result.json
    with its run_config.json, where the directory holds no result yet: the planner then skips those runs (and
    refuses any whose config differs from what the preset composes now, as for any run directory). The number
    written. A record's checkpoint is not published, so an unfinished one is not restored: it reruns."""
    from ffnbench.runs.rundir import RUN_CONFIG_FILE

    if not results.is_file():
        raise ConfigError(f"--restore {results}: no such file; give a published results.jsonl "
                          "(e.g. experiments/cpu-robust/results.jsonl)")
    written = 0
    for i, line in enumerate(results.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            result = RunResult.from_json(json.loads(line), f"{results}:{i}")
        except (ValueError, CorruptRecord) as e:
            raise ConfigError(f"--restore {results}: line {i} is not a run record ({e})") from None
        if result.status not in FINAL_STATUSES or not result.run_name:
            continue
        run_dir = sweep_dir / result.run_name
        try:
            local = RunResult.read(run_dir)
        except CorruptRecord:
            local = None
        if local is not None and local.status in FINAL_STATUSES:  # done here already; a failed one is replaced
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / RUN_CONFIG_FILE, result.config)
        result.replace(run_dir=str(run_dir)).write(run_dir)
        written += 1
    return written
