"""`make sweep [EXP=quick] [LAUNCHER=...] [ARGS="..."]` → `python -m ffnbench.sweep EXP [--launcher L] -- ARGS`.

The command line of ffnbench.sweep (the first paragraph above is its --help description): plans the sweep
(ffnbench.sweep.planning), after putting published runs back with `--restore`; refuses a plan that would waste
or lose work; then trains in rounds, each a Hydra multirun (`python -m ffnbench.train -m experiment=EXP ...`)
over the runs that can start now, until a round has nothing to train; writes the sweep's manifest, prints the
outcome and writes the report. Exit status 1 when a run is not done."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from ffnbench.cli import user_errors_exit
from ffnbench.errors import ConfigError
from ffnbench.fileio import write_json_atomic
from ffnbench.runs.result import FINAL_STATUSES
from ffnbench.runs.rundir import SWEEP_MANIFEST, check_writable
from ffnbench.sweep.keep import manifest_runs, write_report_keeping
from ffnbench.sweep.launchers import LAUNCHERS, launcher_overrides, slurm_arrays
from ffnbench.sweep.outcome import print_outcome
from ffnbench.sweep.planning import MAX_CPU_RUNS, PlannedRun, check_plan, experiments, plan, run_count
from ffnbench.sweep.progress import SWEEP_ENV, estimate
from ffnbench.sweep.restore import restore
from ffnbench.sweep.validation import check_jobs
from hydra_plugins.ffnbench_sweeper.grid_sweeper import refusals_file

MAX_ROUNDS = 64  # rounds of training a sweep plans at most: tuning, each grid extension, judging (a guard only)


def parse_grids(text: str | None) -> list[int] | None:
    """`--grids 0-2,5` → [0, 1, 2, 5]; None for all of them."""
    if not text:
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            span = range(int(low), int(high or low) + 1)
            if not span:
                raise ValueError
            out += span
    except ValueError:
        raise ConfigError(f"--grids {text}: expected grid indices like 0-2,5, each range ascending (the preset's top "
                          "comment lists them)") from None
    return out


class SweepInterrupted(Exception):
    """Ctrl-C during a round: its training process has recorded its runs (interrupted ones resume on a rerun)."""


def _launch(command: list[str], todo: list[PlannedRun], sweep_dir: Path, console: Console) -> dict[Path, str]:
    """Hydra's multirun over exactly the planned jobs (the sweeper's jobs_file), through the chosen launcher. Returns
    why each job refused before it started did (the sweeper's record of their error lines), by run directory."""
    jobs_file = sweep_dir / f".jobs-{os.getpid()}.json"
    refused_file = refusals_file(jobs_file)
    write_json_atomic(jobs_file, [r.overrides for r in todo])
    # wandb's three lines a run (offline mode, the folder, a viewer) left out: the sweep names the offline runs once
    env = {**os.environ, SWEEP_ENV: str(sweep_dir), "WANDB_SILENT": os.environ.get("WANDB_SILENT", "true")}
    proc = subprocess.Popen([*command, f"hydra.sweeper.jobs_file={jobs_file.resolve()}"], env=env)
    try:
        proc.wait()
    except KeyboardInterrupt:
        # The training process got the same Ctrl-C: it saves its checkpoint and records the run as interrupted.
        # subprocess.run would kill it 0.25 s later, mid-record; wait for it instead (a second Ctrl-C kills it).
        console.print("stopping: the training process is saving its checkpoint (Ctrl-C again to kill it)")
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.kill()
            proc.wait()
        raise SweepInterrupted from None
    finally:
        jobs_file.unlink(missing_ok=True)
        refused = _read_refusals(refused_file, todo)
        refused_file.unlink(missing_ok=True)
    if proc.returncode != 0:
        console.print(f"[red]the sweep's training process exited with status {proc.returncode}[/red]")
    return refused


def _read_refusals(path: Path, todo: list[PlannedRun]) -> dict[Path, str]:
    try:
        entries = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError):
        return {}
    return {todo[i].run_dir: str(why) for i, why in entries if isinstance(i, int) and 0 <= i < len(todo)}


def _costs(ns, runs: list[PlannedRun], sweep_cfg):
    """(every arm's cost, the arms within GPU_HOURS, the cut ones, the price, the GPUs) for a preset with arms
    (ffnbench.sweep.arms), from the plan's runs; None for one without."""
    from ffnbench.sweep.planning import preset_grids

    grids = preset_grids(sweep_cfg)
    if not any(arm for _, arm in grids):
        return None
    from ffnbench.placement import visible_gpu_count
    from ffnbench.sweep.cost import arm_costs, price, within_budget

    try:
        rate = price(ns.gpu)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    costs = arm_costs(runs, grids, rate, int(sweep_cfg.lr_protocol.bracket_cap))
    gpus = ns.gpus or max(1, visible_gpu_count())
    kept, cut = within_budget(costs, ns.gpu_hours, gpus) if ns.gpu_hours is not None else (costs, [])
    return costs, kept, cut, rate, gpus


def header(experiment: str, runs: list[PlannedRun]) -> str:
    """The plan in one line: its runs (planning.run_count, what the cost block counts too) and what happens to each."""
    counts = {a: sum(r.action == a for r in runs) for a in ("skip", "resume", "start", "conflict", "running")}
    later = sum(1 + r.neighbours for r in runs if r.action == "wait")
    blocked = sum(1 + r.neighbours for r in runs if r.action == "blocked")
    duplicates = sum(len(r.duplicates) * (1 + (r.neighbours if r.action in ("wait", "blocked") else 0)) for r in runs)
    return (f"{experiment}: {run_count(runs)} runs: {counts['skip']} skipped (already done), {counts['resume']} "
            f"resumed, {counts['start']} started"
            + (f", {counts['running']} running elsewhere (not started again)" if counts["running"] else "")
            + (f", {later} after the lr-tuning stage" if later else "")
            + (f", {blocked} blocked (no lr to judge them at)" if blocked else "")
            + (f", {counts['conflict']} in conflict" if counts["conflict"] else "")
            + (f"; {duplicates} duplicate runs left out (another name for a planned run's resolved config)"
               if duplicates else ""))


def _run_line(r: PlannedRun) -> str:
    same = f"  (also named {', '.join(r.duplicates)})" if r.duplicates else ""
    return f"  {r.action:<8} {r.run_dir}  {' '.join(r.overrides)}  {r.note}{same}".rstrip()


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ffnbench sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", nargs="?", default="quick", help=f"one of: {', '.join(experiments())}")
    parser.add_argument("--launcher", default=os.environ.get("LAUNCHER") or None, help=", ".join(LAUNCHERS))
    parser.add_argument("--dry-run", action="store_true", help="list the runs and what would happen to each")
    parser.add_argument("--confirm", action="store_true", default=os.environ.get("CONFIRM") == "1",
                        help=f"allow more than {MAX_CPU_RUNS} runs on a CPU (also CONFIRM=1)")
    parser.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    parser.add_argument("--grids", default=None,
                        help="only these of the preset's grids, e.g. 0-2,5 (an arm of a campaign; the same runs)")
    parser.add_argument("--restore", type=Path, default=None, metavar="RESULTS_JSONL",
                        help="first put the finished runs of a published results.jsonl back in the sweep's run "
                             "directories (where none is there), so they plan as done: a campaign resumed elsewhere")
    parser.add_argument("--gpu-hours", type=float, default=float(os.environ["GPU_HOURS"]) if os.environ.get("GPU_HOURS")
                        else None, help="a budget: only the arms that fit, in priority order (also GPU_HOURS=)")
    parser.add_argument("--gpu", default=None, help="price the sweep on this GPU (default: the one detected, else "
                                                      "H100)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs the runs spread over (default: those visible)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (after --)")
    ns = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    console = Console(width=140, soft_wrap=True)  # tables fit 140 columns; a line of text is never broken
    started = time.time()

    composed: dict = {}  # the jobs' Hydra compositions, reused whenever the sweep is planned again
    only = parse_grids(ns.grids)
    if ns.gpu_hours is not None and ns.gpu_hours <= 0:
        raise ConfigError(f"GPU_HOURS={ns.gpu_hours:g}: a budget is a positive number of GPU-hours, e.g. GPU_HOURS=24")
    # Every job composed and its settings checked: bad input stops here, before anything is written.
    runs, sweep_cfg = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
    sweep_dir = Path(sweep_cfg.hydra.sweep.dir)
    if ns.restore is not None:
        check_writable(sweep_dir, f"runs_root={sweep_cfg.runs_root}")
        console.print(f"restored {restore(ns.restore, sweep_dir)} finished runs from {ns.restore} into {sweep_dir}")
        runs, sweep_cfg = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
    costs = _costs(ns, runs, sweep_cfg)
    if costs is not None and ns.gpu_hours is not None:
        all_costs, kept, cut = costs[:3]
        if not kept:
            first = all_costs[0]
            raise ConfigError(f"GPU_HOURS={ns.gpu_hours:g}: not even the first arm ({first.name}) fits; it needs "
                              f"{first.hours() + first.bracketing_hours():.1f} GPU-h")
        if cut and only is None:
            only = sorted(i for c in kept for i in c.grids)
            runs, sweep_cfg = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
    print(header(ns.experiment, runs))
    if costs is not None:
        from ffnbench.sweep.cost import describe

        all_costs, _, cut, rate, gpus = costs
        sizes = sorted({r.work.size for r in runs if r.work is not None})
        for line in describe(ns.experiment, all_costs, rate, sizes, gpus, cut, ns.gpu_hours):
            print(line)
    if ns.dry_run:
        print("\n".join(_run_line(r) for r in runs))  # one line a run, however long
        if ns.launcher == "submitit_slurm":
            hours = (lambda r: costs[3].seconds(r.work) / 3600 if r.work else None) if costs is not None else None
            for line in slurm_arrays(runs, sweep_cfg, hours):
                print(line)
        return
    check_plan(runs, sweep_cfg, ns.launcher, ns.confirm)
    check_writable(sweep_dir, f"runs_root={sweep_cfg.runs_root}")  # one line and exit 2, not a traceback mid-launch
    check_jobs(runs, here=ns.launcher != "submitit_slurm")  # train's own checks, before anything is written

    command = [sys.executable, "-m", "ffnbench.train", "-m", f"experiment={ns.experiment}",
               *launcher_overrides(ns.launcher), *ns.overrides]
    manifest = {
        "experiment": ns.experiment,
        "command": " ".join(["make sweep", f"EXP={ns.experiment}"]
                            + ([f"LAUNCHER={ns.launcher}"] if ns.launcher else [])
                            + ([f'ARGS="{" ".join(ns.overrides)}"'] if ns.overrides else [])),
        "train_command": " ".join(command[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_manifest(sweep_dir, manifest, runs)
    console.print(estimate([(r.run_dir, r.flops) for r in runs]).line())
    launched = False
    refused: dict[Path, str] = {}
    # Round 1 trains what can start now (the tuning runs, and judged runs at a fixed lr); each later round, the runs
    # the finished ones unlocked: grid extensions that bracket an optimum (lr_protocol), then the judged runs at
    # their tuned lrs. It ends when a round has nothing to train.
    tried: set[Path] = set()
    for round_ in range(1, MAX_ROUNDS + 1):
        # a run launched in an earlier round and not finished (it failed) is not retried again here: rerun the sweep
        todo = [r for r in runs if r.action in ("start", "resume") and r.run_dir not in tried]
        if not todo:
            break
        tried |= {r.run_dir for r in todo}
        launched = True
        if round_ > 1:
            tuned = sum(r.tuned for r in todo)
            console.print(f"lr-tuning round {round_ - 1} done: {tuned} runs at their tuned lrs, "
                          f"{len(todo) - tuned} tuning runs or retries")
        try:
            refused.update(_launch(command, todo, sweep_dir, console))
        except SweepInterrupted:
            console.print("sweep stopped by Ctrl-C: rerun the same command to resume (finished runs are kept, "
                          "interrupted ones resume from their checkpoints)")
            sys.exit(130)
        if not any(r.action == "wait" for r in runs):
            break
        runs, _ = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
        check_plan(runs, sweep_cfg, ns.launcher, ns.confirm)  # later rounds' runs get the first round's checks
        check_jobs(runs, here=ns.launcher != "submitit_slurm")
        _write_manifest(sweep_dir, manifest, runs)
    elsewhere = [r for r in runs if r.action == "running"]
    if elsewhere:
        console.print(f"not started: {len(elsewhere)} runs are training elsewhere")
        for r in elsewhere:
            console.print(f"  running {r.note}: {r.run_dir}")
    if not launched and not elsewhere:
        console.print("nothing to train: every run is already done")
    statuses = print_outcome(runs, console, refused)
    offline = offline_wandb_runs(runs)
    if offline:
        print(f"wandb: {offline} runs logged offline; upload them with `wandb sync {sweep_dir}/*/wandb/offline-run-*`")
    console.print(f"sweep wall time: {time.time() - started:.0f} s")
    if not ns.no_report:
        report, why = write_report_keeping(sweep_dir)
        print(f"report: {report}" if report else why)
    if any(s not in FINAL_STATUSES for s in statuses):
        sys.exit(1)


def _write_manifest(sweep_dir: Path, manifest: dict, runs: list[PlannedRun]) -> None:
    """sweep.json: the planned runs, then every other run folder of the sweep with a final record (sweep.keep)."""
    flops = {r.run_dir: r.flops for r in runs}
    listed = manifest_runs([r.run_dir for r in runs], sweep_dir)
    write_json_atomic(sweep_dir / SWEEP_MANIFEST, {**manifest, "runs": [str(d) for d in listed],
                                                   "flops": [flops.get(d) for d in listed]})


def offline_wandb_runs(runs: list[PlannedRun]) -> int:
    """How many of the runs hold an offline wandb run (to upload with `wandb sync`)."""
    return sum(any((r.run_dir / "wandb").glob("offline-run-*")) for r in runs if (r.run_dir / "wandb").is_dir())
