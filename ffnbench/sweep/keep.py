"""What a sweep writes into its folder never holds fewer finished runs than the folder does.

A sweep writes sweep.json (its manifest: the run directories the report reads) when it starts, and the report
(REPORT.md, results.jsonl, figures/) when it ends. A sweep of part of a preset (`--grids`, fewer seeds in ARGS) in a
folder that holds a whole finished sweep would otherwise list, and report, only its own runs. So the manifest lists
the planned runs and, after them, every run directory of the folder (and of the manifest it replaces) that holds a
finished or diverged record: the report is built from the run folders. A report that would still hold fewer finished
runs than the results.jsonl it replaces, or that cannot be built (runs of different configs share the folder), is
not written: the folder's report is left as it is and the sweep says why."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ffnbench.errors import FFNBenchError
from ffnbench.fileio import CorruptRecord, read_json
from ffnbench.runs.result import FINAL_STATUSES, RESULT_FILE, RunResult
from ffnbench.runs.rundir import SWEEP_MANIFEST


def _final(run_dir: Path) -> bool:
    try:
        result = RunResult.read(run_dir)
    except CorruptRecord:
        return False
    return result is not None and result.status in FINAL_STATUSES


def finished_runs(sweep_dir: Path) -> list[Path]:
    """The run directories of a sweep folder that hold a finished or diverged record: every <run>/result.json under
    it, and the runs its sweep.json lists (which may lie elsewhere)."""
    found = {p.parent for p in Path(sweep_dir).rglob(RESULT_FILE)}
    try:
        manifest = read_json(Path(sweep_dir) / SWEEP_MANIFEST) if (Path(sweep_dir) / SWEEP_MANIFEST).exists() else {}
    except CorruptRecord:
        manifest = {}
    for entry in (manifest or {}).get("runs") or []:
        path = Path(str(entry))
        found.add(path if path.is_absolute() or path.exists() else Path(sweep_dir) / path.name)
    return sorted(d for d in found if _final(d))


def manifest_runs(planned: Sequence[Path], sweep_dir: Path) -> list[Path]:
    """What sweep.json lists: the planned runs, then every other run directory of the folder with a final record."""
    seen = {p.resolve() for p in planned}
    return [*planned, *(d for d in finished_runs(sweep_dir) if d.resolve() not in seen)]


def _records(results: Path) -> int:
    """The run records of a results.jsonl (one per non-empty line); 0 when there is none."""
    try:
        return sum(1 for line in results.read_text().splitlines() if line.strip())
    except OSError:
        return 0


def write_report_keeping(sweep_dir: Path) -> tuple[Path | None, str]:
    """Write the sweep's report from its run folders (its manifest's runs), unless it would hold fewer finished runs
    than the results.jsonl it replaces, or cannot be built. (REPORT.md's path, "") when written; (None, why) when
    the folder's report is left as it is."""
    from ffnbench.report import RESULTS_FILE, build, load

    try:
        loaded = load(sweep_dir)
    except FFNBenchError as e:
        return None, f"report not written (the folder's report is kept): {e}"
    before = _records(Path(sweep_dir) / RESULTS_FILE)
    if len(loaded.runs) < before:
        return None, (f"report not written: its {len(loaded.runs)} finished runs are fewer than the {before} of "
                      f"{Path(sweep_dir) / RESULTS_FILE}, which is kept (rebuild it with `make report "
                      f"SWEEP={sweep_dir}` once the run folders hold them)")
    return build(loaded, Path(sweep_dir), str(sweep_dir))[0], ""
