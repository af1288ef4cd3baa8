"""A report end to end: loaded runs → a verdict per claim → figures, results.jsonl and REPORT.md in one folder."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ffnbench.claims import ClaimResult, Run
from ffnbench.claims import evaluate as evaluate_claims
from ffnbench.fileio import atomic_file, write_json_atomic
from ffnbench.report.figures import draw_figures
from ffnbench.report.layout import FIGURES_DIR, REPORT_FILE, RESULTS_FILE
from ffnbench.report.load import Loaded, load
from ffnbench.report.sections import render
from ffnbench.runs.rundir import SWEEP_MANIFEST


def write_results(runs: list[Run], path: Path) -> None:
    """The runs as a results.jsonl (one RunResult per line, by run name): what a published report commits,
    and what rebuilds it."""
    with atomic_file(path) as f:
        f.write("".join(r.result.jsonl_line() for r in sorted(runs, key=lambda r: r.name)).encode())


def build(loaded: Loaded, out_dir: Path, source_arg: str,
          bench_files: Iterable[Path] | None = None) -> tuple[Path, list[ClaimResult]]:
    """Write REPORT.md, results.jsonl and figures/ for `loaded` into `out_dir`. `source_arg` is the command
    argument that rebuilds the report; `bench_files`, the alignment benchmarks C9 reads (None: the committed
    ones). Returns REPORT.md's path and the claims' results."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = evaluate_claims(loaded.runs, bench_files)
    figures = draw_figures(loaded.runs, out_dir / FIGURES_DIR)
    results_path = out_dir / RESULTS_FILE
    if not (results_path.exists() and Path(str(loaded.source)).resolve() == results_path.resolve()):
        # a report rebuilt from a published results.jsonl leaves that file as published (its records may be of an
        # earlier schema, read through ffnbench.runs.migrate)
        write_results(loaded.runs, results_path)
    if loaded.manifest and not (out_dir / SWEEP_MANIFEST).exists():  # a published copy keeps its sweep's command
        write_json_atomic(out_dir / SWEEP_MANIFEST, loaded.manifest)
    path = out_dir / REPORT_FILE
    with atomic_file(path) as f:
        f.write(render(loaded, results, figures, source_arg, out_dir).encode())
    return path, results


def write_report(sweep: Path, out_dir: Path | None = None, bench_files: Iterable[Path] | None = None) -> Path:
    """Read a sweep directory (or a results.jsonl), and write REPORT.md, results.jsonl and figures/ into
    `out_dir` (default: the sweep directory, or the folder holding the results.jsonl). Returns REPORT.md."""
    sweep = Path(sweep)
    loaded = load(sweep)
    out = Path(out_dir) if out_dir is not None else (sweep.parent if sweep.is_file() else sweep)
    return build(loaded, out, str(sweep), bench_files)[0]
