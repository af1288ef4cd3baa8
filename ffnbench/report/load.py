"""Where a report's runs come from: a sweep directory (its sweep.json, else every result.json under it) or a
published results.jsonl, each record sorted into a usable run or a reason it is not used; then the checks
that the runs may be pooled into one report (same config but for the studied factors, one run per variant
and seed)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ffnbench.claims import MODEL_FACTORS, RUN_FACTORS, Run
from ffnbench.claims.lr_protocol import mark_neighbours
from ffnbench.config.identity import NON_IDENTITY_KEYS, flatten, identity_diff
from ffnbench.errors import FFNBenchError
from ffnbench.fileio import CorruptRecord, read_json
from ffnbench.runs.result import RESULT_FILE, RunResult
from ffnbench.runs.rundir import RUN_CONFIG_FILE, SWEEP_MANIFEST

RUNS_ROOT = Path("runs")
# The factors ffnbench studies: runs that differ only in these (and in where/how they were observed) can be
# pooled into one report. Anything else (token budget, data, weight decay, ...) makes them incomparable.
# `tuning` is a run's role (ffnbench.sweep.tuning): an lr-tuning run is pooled with the runs it chose an lr for.
STUDIED = ("ffn", "seed", "optim.lr", "tuning", *(f"model.{k}" for k in MODEL_FACTORS),
           *(f"{g}.{k}" for g, k in RUN_FACTORS))
POOLABLE = (*NON_IDENTITY_KEYS, "name", *STUDIED)


@dataclass(frozen=True)
class Unused:
    """A run the statistics leave out, and why (the report lists them)."""

    run: str
    status: str
    reason: str


@dataclass
class Loaded:
    """What a report is built from."""

    runs: list[Run]  # finished and diverged
    unused: list[Unused]
    source: Path  # the sweep directory, the results.jsonl, or wandb:<entity>/<project>[/<group>]
    manifest: dict | None = None  # the sweep's sweep.json, when there is one

    def add(self, item: Run | Unused) -> None:
        (self.unused if isinstance(item, Unused) else self.runs).append(item)


def first_line(text: object, limit: int = 160) -> str:
    """The first line of an error message, shortened to fit a table cell."""
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else "no error recorded"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def classify(result: RunResult, name: str) -> Run | Unused:
    """A record the analysis can use (finished or diverged), or why it cannot."""
    status = result.status
    if status == "running":
        steps, total = ("?" if x is None else x for x in (result.steps, result.total_steps))
        return Unused(name, status, f"still running (step {steps} of {total})")
    if status == "failed":
        return Unused(name, status, f"failed: {first_line(result.error)}")
    if status == "interrupted":  # stopped by a signal; a rerun resumes it
        return Unused(name, status, first_line(result.error))
    try:
        run = Run.from_result(result)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return Unused(name, str(status), f"incomplete record ({type(e).__name__}: {e})")
    return run  # a finished run without a finite final loss counts as diverged (Run.diverged), not as unused


# ---- a sweep directory ------------------------------------------------------------------------------------


def _resolve_run_dir(entry: str, sweep: Path) -> Path:
    """sweep.json lists run directories as the sweep saw them (often relative to where it ran)."""
    path = Path(entry)
    for candidate in ((path,) if path.is_absolute() else (Path.cwd() / path, sweep / path)):
        if candidate.exists():
            return candidate
    return sweep / path.name


def _run_dirs(sweep: Path, manifest: dict | None) -> list[Path]:
    if manifest and manifest.get("runs"):
        return [_resolve_run_dir(str(p), sweep) for p in manifest["runs"]]
    found = {p.parent for name in (RESULT_FILE, RUN_CONFIG_FILE) for p in sweep.rglob(name)}
    return sorted(found)


def read_manifest(folder: Path) -> dict | None:
    """The sweep's sweep.json, if it has a readable one (without it the run directories are still found)."""
    try:
        return read_json(folder / SWEEP_MANIFEST) if (folder / SWEEP_MANIFEST).exists() else None
    except CorruptRecord:
        return None


def load_sweep(sweep: Path) -> Loaded:
    """Every run directory of a sweep: its result.json, or why there is none to use."""
    manifest = read_manifest(sweep)
    dirs = _run_dirs(sweep, manifest)
    if not dirs:
        raise FFNBenchError(f"{sweep}: no runs found (expected {SWEEP_MANIFEST} or <run>/{RESULT_FILE} under it); make "
                            "a sweep with `make sweep` (or `make sweep EXP=<experiment>`), then "
                            "`make report SWEEP=<dir>`")
    loaded = Loaded([], [], sweep, manifest)
    for run_dir in dirs:
        try:
            result = RunResult.read(run_dir)
        except CorruptRecord as e:
            loaded.unused.append(Unused(run_dir.name, "corrupt", str(e)))
            continue
        if result is None:
            loaded.unused.append(Unused(run_dir.name, "missing", f"no {RESULT_FILE} (not started yet, or killed "
                                                                  "before it wrote one)"))
            continue
        loaded.add(classify(result, run_dir.name))
    return loaded


def latest_sweep(root: Path = RUNS_ROOT) -> Path:
    """The most recently started sweep: the newest <root>/*/sweep.json."""
    manifests = list(Path(root).glob(f"*/{SWEEP_MANIFEST}"))
    if not manifests:
        raise FFNBenchError(f"no sweep found under {root}/ (no {root}/*/{SWEEP_MANIFEST}); run one with "
                            "`make sweep`, or name a sweep directory: `make report SWEEP=<dir>`")

    def started(p: Path) -> tuple:
        return (str((read_manifest(p.parent) or {}).get("started_at") or ""), p.stat().st_mtime)

    return max(manifests, key=started).parent


# ---- a results.jsonl --------------------------------------------------------------------------------------


def load_jsonl(path: Path) -> Loaded:
    """A published results.jsonl: one RunResult per line (and the sweep.json beside it, if any)."""
    loaded = Loaded([], [], path, read_manifest(path.parent))
    lines = [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    if not lines:
        raise FFNBenchError(f"{path}: empty; expected one result record per line (written by `make report`)")
    for i, line in lines:
        where = f"{path.name}:{i}"
        try:
            result = RunResult.from_json(json.loads(line), f"line {i}")
        except json.JSONDecodeError as e:
            loaded.unused.append(Unused(where, "corrupt", f"line {i}: invalid JSON ({e})"))
            continue
        except CorruptRecord as e:
            loaded.unused.append(Unused(where, "corrupt", str(e)))
            continue
        loaded.add(classify(result, str(result.run_name or where)))
    return loaded


def load(source: Path) -> Loaded:
    """A sweep directory or a results.jsonl, checked for pooling."""
    source = Path(source)
    if source.is_file():
        loaded = load_jsonl(source)
    elif source.is_dir():
        loaded = load_sweep(source)
    else:
        raise FFNBenchError(f"{source}: no such sweep directory or results.jsonl; make a sweep with `make sweep` "
                            "(its runs land in runs/<experiment>/), then `make report SWEEP=runs/<experiment>`")
    return checked(loaded)


# ---- what may be pooled -----------------------------------------------------------------------------------


def checked(loaded: Loaded) -> Loaded:
    """Refuse mixed configs; keep one record per variant and seed."""
    check_poolable(loaded.runs)
    loaded.runs, duplicates = drop_duplicates(loaded.runs)
    loaded.runs = mark_neighbours(loaded.runs)
    loaded.unused += duplicates
    return loaded


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


MAX_SHOWN_KEYS = 2  # the differing settings (and values of each) a refusal to pool names (then a count)


def check_poolable(runs: list[Run]) -> None:
    """Refuse to pool runs that differ in anything but the studied factors: one message naming every
    differing key, its values, and the runs holding each value."""
    if not runs:
        return
    ref = runs[0].result.config
    keys = sorted({k for r in runs[1:] for k in identity_diff(ref, r.result.config, POOLABLE)})
    if not keys:
        return
    flat = [(r.name, flatten(r.result.config)) for r in runs]
    shown_keys = keys[:MAX_SHOWN_KEYS]
    values = {}
    for key in shown_keys:
        by_value: dict[str, list[str]] = defaultdict(list)
        for name, config in flat:
            by_value[_short(repr(config.get(key)))].append(name)
        values[key] = by_value
    keys_text = "; ".join(f"{key}: " + " vs ".join(f"{v} ({_names(names, 2)})" for v, names in
                                                   list(by_value.items())[:MAX_SHOWN_KEYS])
                          + (f" vs {len(by_value) - MAX_SHOWN_KEYS} more values" if len(by_value) > MAX_SHOWN_KEYS
                             else "")
                          for key, by_value in values.items())
    more = f" and {len(keys) - len(shown_keys)} more settings" if len(keys) > len(shown_keys) else ""
    # One short line: one-off runs in one folder (runs/default/) differ in many settings, each with long values.
    raise FFNBenchError(
        f"mixed configs: the runs differ in more than ffnbench's studied factors — {keys_text}{more}; report each "
        "config's runs on their own: give them their own name=... (runs/<name>/) and report that folder"
    )


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _identity(r: Run) -> str:
    studied = {k: v for k, v in flatten(r.result.config).items()
               if any(k == s or k.startswith(s + ".") for s in STUDIED)}
    return json.dumps(studied, sort_keys=True, default=str)


def drop_duplicates(runs: list[Run]) -> tuple[list[Run], list[Unused]]:
    """The same variant and seed twice (one run listed by two sweeps): keep one, finished before diverged.
    Two such records with different configs are refused."""
    kept: dict[str, Run] = {}
    dropped = []
    for r in sorted(runs, key=lambda r: (r.status != "finished", r.name)):
        identity = _identity(r)
        other = kept.get(identity)
        if other is None:
            kept[identity] = r
            continue
        diff = identity_diff(other.result.config, r.result.config, (*NON_IDENTITY_KEYS, "name"))
        if diff:
            raise FFNBenchError(f"runs {other.name} and {r.name} are the same variant and seed with different configs "
                                f"({', '.join(diff)}); remove one of them from the sweep")
        dropped.append(Unused(r.name, r.status, f"duplicate of {other.name} (same variant, seed and config)"))
    return sorted(kept.values(), key=lambda r: r.name), dropped
