"""Publish what the campaign has finished so far: `python experiments/cpu-robust/snapshot.py [runs/cpu_robust]`.

Writes results.jsonl (every finished or diverged run under the campaign's run directory, by run name) and sweep.json
(the campaign's command, its runs and their FLOPs) beside this file; then rebuild the report from them with
`python -m ffnbench.report experiments/cpu-robust/results.jsonl`. The campaign runs one arm at a time, so the
sweep.json under runs/cpu_robust/ lists only the latest arm's runs: this one lists every published run. A run still
training, or one that failed, is left out (a rerun of campaign.sh resumes or retries it), and so is every run of an
arm still under way (the latest sweep, while any of its runs has not finished): a part of an lr grid reads as a cell
of its own (arm 12's first tuning runs read C6 as init-dependent), so an arm is published whole."""

import json
import sys
from datetime import datetime
from pathlib import Path

from ffnbench.fileio import atomic_file, write_json_atomic
from ffnbench.runs.result import RunResult

HERE = Path(__file__).parent
ROOT = Path("runs/cpu_robust")  # campaign.sh's run directory, relative to the repository root


def under_way(runs: Path) -> set[str]:
    """The run names of the latest sweep (runs/sweep.json, written as it plans each round) while one of its runs
    has no finished or diverged result; empty once it has ended."""
    manifest = runs / "sweep.json"
    if not manifest.exists():
        return set()
    names = {Path(r).name for r in json.loads(manifest.read_text())["runs"]}
    ended = {n for n in names if (r := RunResult.read(runs / n)) is not None and r.status in ("finished", "diverged")}
    return names if ended != names else set()


def main(runs: Path) -> None:
    done = []
    for run_dir in sorted(p.parent for p in runs.glob("*/result.json")):
        result = RunResult.read(run_dir)
        if result is not None and result.status in ("finished", "diverged"):
            done.append(result)
    if not done:
        sys.exit(f"{runs}: no finished run (expected <run>/result.json); run experiments/cpu-robust/campaign.sh")
    done.sort(key=lambda r: r.run_name)
    # a published record never changes: its line stays byte for byte as published (a reader migrates it), so a
    # snapshot adds lines and rewrites none
    published = {}
    if (HERE / "results.jsonl").exists():
        for line in (HERE / "results.jsonl").read_text().splitlines(keepends=True):
            published[json.loads(line)["run_name"]] = line
    held = under_way(runs)
    kept = [r for r in done if r.run_name in published or r.run_name not in held]
    if len(kept) < len(done):
        print(f"held back {len(done) - len(kept)} finished runs of the arm under way ({len(held)} runs in its sweep)")
    done = kept
    with atomic_file(HERE / "results.jsonl") as f:
        f.write("".join(published.get(r.run_name) or r.jsonl_line() for r in done).encode())

    def started(r: RunResult) -> float:
        return datetime.strptime(r.finished_at, "%Y-%m-%dT%H:%M:%S%z").timestamp() - (r.wall_time_s or 0)

    first = min(done, key=started)
    write_json_atomic(HERE / "sweep.json", {
        "experiment": "cpu_robust",
        "command": "experiments/cpu-robust/campaign.sh",
        "train_command": "-m ffnbench.train -m experiment=cpu_robust hydra/launcher=joblib logger=csv",
        "runs": [str(ROOT / r.run_name) for r in done],
        "flops": [(r.flops or {}).get("total_training") for r in done],
        "started_at": datetime.fromtimestamp(started(first)).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    print(f"{len(done)} runs ({sum(r.status == 'diverged' for r in done)} diverged) → {HERE / 'results.jsonl'}, "
          f"{HERE / 'sweep.json'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
