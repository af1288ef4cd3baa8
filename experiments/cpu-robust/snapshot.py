"""Publish what the campaign has finished so far:
`python experiments/cpu-robust/snapshot.py [runs/cpu_robust] [--with-unfinished-arm]`.

Writes results.jsonl (every finished or diverged run under the campaign's run directory, by run name) and sweep.json
(the campaign's command, its runs and their FLOPs) beside this file; then rebuild the report from them with
`python -m ffnbench.report experiments/cpu-robust/results.jsonl`. The sweep.json under runs/cpu_robust/ is the
latest sweep's manifest (its planned runs; a newer sweep also lists the folder's finished runs): this one lists every
published run. A run still training, or one that failed, is left out (a rerun of campaign.sh resumes or retries it),
and so is every unpublished run of that manifest while one of its runs has not ended: a part of an lr grid reads as
a cell of its own (arm 12's first tuning runs read C6 as init-dependent), so an arm is published whole. A sweep that
ended with runs it could not make (an lr no tuning run could choose) holds its arm until `--with-unfinished-arm`."""

import json
import sys
from datetime import datetime
from pathlib import Path

from ffnbench.fileio import atomic_file, write_json_atomic
from ffnbench.runs.result import RunResult

HERE = Path(__file__).parent
ROOT = Path("runs/cpu_robust")  # campaign.sh's run directory, relative to the repository root


ENDED = ("finished", "diverged", "failed")  # a failed run is campaign.sh's to retry: it holds nothing back


def unfinished(runs: Path, status: dict[str, str]) -> tuple[set[str], list[str]]:
    """The latest sweep's runs (runs/sweep.json, written as it plans each round), and those that have not ended
    (`status`, by run directory: no result yet, or one still running or interrupted); no runs when there is no
    manifest."""
    manifest = runs / "sweep.json"
    if not manifest.exists():
        return set(), []
    names = {Path(r).name for r in json.loads(manifest.read_text())["runs"]}
    return names, sorted(n for n in names if status.get(n) not in ENDED)


def main(runs: Path, with_unfinished_arm: bool = False) -> None:
    results = {p.parent.name: r for p in runs.glob("*/result.json") if (r := RunResult.read(p.parent)) is not None}
    done = sorted((r for r in results.values() if r.status in ("finished", "diverged")), key=lambda r: r.run_name)
    # a published record never changes: its line stays byte for byte as published (a reader migrates it), so a
    # snapshot adds lines and rewrites none
    published = {}
    if (HERE / "results.jsonl").exists():
        for line in (HERE / "results.jsonl").read_text().splitlines(keepends=True):
            published[json.loads(line)["run_name"]] = line
    arm, pending = unfinished(runs, {name: r.status for name, r in results.items()})
    if pending and not with_unfinished_arm:
        kept = [r for r in done if r.run_name in published or r.run_name not in arm]
        if len(kept) < len(done):
            print(f"held back {len(done) - len(kept)} finished runs: the latest sweep has {len(pending)} runs not "
                  f"ended ({', '.join(pending[:2])}{', ...' if len(pending) > 2 else ''}); once it has ended for "
                  "good, --with-unfinished-arm publishes them")
        done = kept
    if not done:
        print(f"{runs}: no finished run to publish (expected <run>/result.json); run "
              "experiments/cpu-robust/campaign.sh", file=sys.stderr)
        sys.exit(2)  # bad input, as every ffnbench command says it: one line, exit 2, nothing written
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


USAGE = "usage: python experiments/cpu-robust/snapshot.py [runs/cpu_robust] [--with-unfinished-arm]"

if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__) or 0)
    if unknown := [a for a in sys.argv[1:] if a.startswith("-") and a != "--with-unfinished-arm"]:
        sys.exit(print(f"snapshot.py: unknown option {unknown[0]}; {USAGE}", file=sys.stderr) or 2)
    args = [a for a in sys.argv[1:] if a != "--with-unfinished-arm"]
    main(Path(args[0]) if args else ROOT, with_unfinished_arm=len(args) < len(sys.argv) - 1)
