"""`make sweep [EXP=quick] [LAUNCHER=...] [ARGS="..."]` → `python -m ffnbench.sweep EXP [--launcher L] -- ARGS`.

Plans the sweep before running it (every run's directory and what will happen to it: skipped because
finished, resumed from its checkpoint, started, or left to the process that is training it now), refuses what
would waste or lose work, runs the grid
through Hydra's multirun (`python -m ffnbench.train -m experiment=EXP ...`) with the chosen launcher,
prints the outcome, and writes the report. Planning imports neither Lightning nor the training code
(ffnbench.rundir makes the run's own decision), so `--dry-run` answers at once."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf, open_dict
from rich.console import Console
from rich.table import Table

from ffnbench.cli import user_errors_exit
from ffnbench.config.compose import CONF_DIR, compose, compose_many
from ffnbench.config.identity import HARDWARE_KEYS, with_hardware
from ffnbench.config.schema import to_container, trainer_config
from ffnbench.errors import ConfigError, RunDirError
from ffnbench.hardware import planned_hardware, resolve_accelerator
from ffnbench.lr_protocol import check_protocols
from ffnbench.progress import SWEEP_ENV, estimate, planned_flops
from ffnbench.records import SWEEP_MANIFEST, CorruptRecord, write_json_atomic
from ffnbench.result import FINAL_STATUSES, RunResult
from ffnbench.rundir import lock_holder, plan_run
from ffnbench.tuning import TUNED, TuningRun, check_tuning, choose_lr, extension, is_tuning, tuning_group, with_lr
from hydra_plugins.ffnbench_sweeper.grid_sweeper import expand_grids

MAX_ROUNDS = 64  # rounds of training a sweep plans at most: tuning, each grid extension, judging (a guard only)
MAX_CPU_RUNS = 30  # more runs than this on a CPU needs CONFIRM=1: hours of work deserve a second look
LAUNCHERS = {
    "basic": None,
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
}
# ours wrap submitit's (conf/hydra/launcher/): SLURM settings from `slurm:`, and the GPUs for the local executor
LAUNCHER_CONFIG = {"submitit_slurm": "slurm", "submitit_local": "local"}


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if not p.stem.startswith("_"))


def check_experiment(name: str) -> None:
    if name not in experiments():
        raise ConfigError(f"EXP={name}: no such experiment; known experiments: {', '.join(experiments())}")


def launcher_overrides(launcher: str | None) -> list[str]:
    """The Hydra override for a launcher, after checking its plugin is installed."""
    launcher = launcher or "basic"
    if launcher not in LAUNCHERS:
        raise ConfigError(f"LAUNCHER={launcher}: unknown launcher; known launchers: {', '.join(LAUNCHERS)}")
    plugin = LAUNCHERS[launcher]
    if plugin is None:
        return []
    module, package = plugin
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"LAUNCHER={launcher} needs the {package} package, which is not installed: "
            f"`.venv/bin/pip install {package}` (or `pip install 'ffnbench[launchers]'`)"
        )
    return [f"hydra/launcher={LAUNCHER_CONFIG.get(launcher, launcher)}"]


@dataclass(frozen=True)
class PlannedRun:
    overrides: list[str]
    run_dir: Path
    # skip | resume | start | conflict | wait (for the tuning runs that choose its lr) | blocked (they cannot: all
    # diverged) | running (another process trains it now: not started again)
    action: str
    note: str = ""
    flops: float | None = None  # the training FLOPs its config asks for (progress.planned_flops)
    tuned: bool = False  # its lr is the one its tuning runs chose (optim.lr=tuned)


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(override).is_sweep_override()


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


def sweep_config(experiment: str, launcher: str | None, args: list[str]):
    """The sweep's own composed config (its directory, sweeper and launcher), without its jobs."""
    check_experiment(experiment)
    base = [f"experiment={experiment}", *launcher_overrides(launcher)]
    return compose([*base, *(a for a in args if not _is_sweep(a))], return_hydra_config=True)


def plan(experiment: str, launcher: str | None, args: list[str],
         composed_cache: dict | None = None, only_grids: list[int] | None = None) -> tuple[list[PlannedRun], dict]:
    """Every run of the sweep, its directory, and what rerunning it would do. Composes exactly what
    `python -m ffnbench.train -m experiment=EXP <args>` composes, job by job; a job whose lr comes from its
    tuning runs (`optim.lr: tuned`, see ffnbench.tuning) gets the lr they chose, or waits for them.
    `composed_cache`: kept by a caller that plans again (after the tuning stage), so no job is composed twice."""
    sweep_cfg = sweep_config(experiment, launcher, args)
    launcher_args = launcher_overrides(launcher)
    sweeper = sweep_cfg.hydra.sweeper
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else None
    grids = OmegaConf.to_container(sweeper.grids) if sweeper.get("grids") else None
    if only_grids is not None:  # a part of the preset (an arm of a campaign): the same runs, fewer of them
        bad = [i for i in only_grids if not grids or not 0 <= i < len(grids)]
        if bad:
            raise ConfigError(f"--grids: EXP={experiment} has {len(grids or [])} grids (0-{len(grids or []) - 1}); "
                              f"there is no grid {bad[0]}")
        grids = [grids[i] for i in only_grids]
    jobs = expand_grids(params, grids, [f"experiment={experiment}", *args])
    here = launcher != "submitit_slurm"  # where the runs resolve their device and precision: here, or a SLURM node
    composed = _compose_jobs(jobs, launcher_args, here, composed_cache)
    tuning_runs = [TuningRun(config, run_dir) for _, run_dir, config, _ in composed if is_tuning(config)]
    check_tuning([(config, run_dir.name) for _, run_dir, config, _ in composed if not is_tuning(config)],
                 tuning_runs)
    composed += _bracket(composed, tuning_runs, launcher_args, here, composed_cache)
    runs: list[PlannedRun | None] = []
    resolved: dict[int, list[str]] = {}  # position in `runs` → the job with its chosen lr
    for job, run_dir, config, undecided in composed:
        if config["optim"]["lr"] != TUNED:
            runs.append(_classify(job, run_dir, config, undecided))
            continue
        choice = choose_lr(config, tuning_runs)
        if choice.lr is None:
            runs.append(PlannedRun(job, run_dir, "blocked" if choice.blocked else "wait", f"lr: {choice.describe()}",
                                   planned_flops(config)))
        else:
            resolved[len(runs)] = with_lr(job, choice.lr)
            runs.append(None)
    for i, (job, run_dir, config, undecided) in zip(resolved, _compose_jobs(list(resolved.values()), launcher_args,
                                                                            here, composed_cache)):
        runs[i] = dataclasses.replace(_classify(job, run_dir, config, undecided), tuned=True)
    unique: dict[Path, PlannedRun] = {}  # a tuned job may be a run a grid names too (the same lr): it runs once
    for r in runs:
        if r is not None:
            unique.setdefault(r.run_dir, r)
    return list(unique.values()), sweep_cfg


def _bracket(composed: list, tuning_runs: list[TuningRun], launcher_args: list[str], here: bool,
             cache: dict | None) -> list[tuple[list[str], Path, dict, list[str]]]:
    """The tuning jobs that bracketing adds (ffnbench.tuning.extension), composed, and added to `tuning_runs`:
    each round extends every grid whose choice sits at an edge by one step, until no choice moves (its new runs
    have no outcome yet, or the optimum is bracketed, or the cap is reached). A function of the finished runs, so
    planning again asks for the same runs."""
    jobs = {run_dir: job for job, run_dir, config, _ in composed if is_tuning(config)}
    judged = [config for _, _, config, _ in composed if not is_tuning(config) and config["optim"]["lr"] == TUNED]
    steps: dict[frozenset, int] = {}  # tuning group → the steps its grid was extended by
    added: list[tuple[list[str], Path, dict, list[str]]] = []
    while True:
        new_jobs = []
        asked: set[frozenset] = set()  # a group's judged seeds share its choice: ask it once a round
        for config in judged:
            group = tuning_group(config, tuning_runs)
            if not group or group[0].key in asked:
                continue
            asked.add(group[0].key)
            extra = [job for job in extension(config, tuning_runs, jobs, steps.get(group[0].key, 0))
                     if job not in jobs.values()]
            if extra:
                new_jobs.append((group[0].key, extra))
        if not new_jobs:
            return added
        for key, extra in new_jobs:
            steps[key] = steps.get(key, 0) + 1
            for job, run_dir, config, undecided in _compose_jobs(extra, launcher_args, here, cache):
                jobs[run_dir] = job
                tuning_runs.append(TuningRun(config, run_dir))
                added.append((job, run_dir, config, undecided))


def _compose_jobs(jobs: list[list[str]], launcher_args: list[str], here: bool,
                  cache: dict | None = None) -> list[tuple[list[str], Path, dict, list[str]]]:
    """(job, run directory, config, undecided keys) for each job, composed as Hydra's multirun composes it, with
    the device and precision the run will resolve (`here`: on this machine; else on a node, so the keys only it
    can decide are left undecided)."""
    out = []
    for job, cfg in zip(jobs, compose_many([[*job, *launcher_args] for job in jobs], return_hydra_config=True,
                                                 cache=cache)):
        run_dir = Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)
        with open_dict(cfg):
            del cfg["hydra"]  # runtime-only keys (output_dir) cannot be resolved outside a running job
        config = to_container(cfg)
        check_protocols(config)
        hardware = planned_hardware(trainer_config(config["trainer"]), here)
        undecided = [key for key, value in zip(HARDWARE_KEYS, hardware) if value is None]
        out.append((job, run_dir, with_hardware(config, *hardware), undecided))
    return out


def _classify(job: list[str], run_dir: Path, config: dict, undecided: list[str]) -> PlannedRun:
    """What the run will do with its directory: the run's own decision (rundir.plan_run), made ahead of time,
    with the device and precision it will resolve to where they can be known here (`undecided`: those that
    cannot). A run that another process trains now is left to it."""
    holder = lock_holder(run_dir)
    if holder is not None:
        return PlannedRun(job, run_dir, "running", str(holder))
    try:
        run = plan_run(run_dir, config, undecided)
    except RunDirError as e:
        return PlannedRun(job, run_dir, "conflict", str(e))
    status = run.previous.status if run.previous else ""
    flops = planned_flops(config)
    if run.action == "skip":
        return PlannedRun(job, run_dir, "skip", status, flops)
    if run.action == "resume":
        return PlannedRun(job, run_dir, "resume", f"from step {run.resumed_from}", flops)
    return PlannedRun(job, run_dir, "start", status, flops)


def restore(results: Path, sweep_dir: Path) -> int:
    """Write each finished or diverged record of a published results.jsonl back as <sweep_dir>/<run name>/result.json
    with its run_config.json, where the directory holds no result yet: the planner then skips those runs (and
    refuses any whose config differs from what the preset composes now, as for any run directory). The number
    written. A record's checkpoint is not published, so an unfinished one is not restored: it reruns."""
    from ffnbench.records import RUN_CONFIG_FILE

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


def trains_on_cpu(cfg, launcher: str | None) -> bool:
    """Whether the sweep's runs will train on a CPU: asked for (trainer.accelerator=cpu), or started on this
    machine (every launcher but submitit_slurm) when it has no GPU. A SLURM job trains on its node, whatever the
    machine that plans it (a login node) has. A GPU asked for where the runs start and CUDA sees none is a
    ConfigError that says why, before any work."""
    requested = cfg.trainer.get("accelerator", "auto")
    if requested == "cpu":
        return True
    if launcher == "submitit_slurm":
        return False
    return resolve_accelerator(requested) == "cpu"


def _check_local_gpus(launcher: str | None) -> None:
    """submitit's local executor gives its jobs GPUs 0..n-1 (it writes CUDA_VISIBLE_DEVICES itself): a subset
    chosen with CUDA_VISIBLE_DEVICES would be ignored."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if launcher != "submitit_local" or not visible or not visible.strip():
        return
    from ffnbench.hardware import visible_gpu_count

    if [v.strip() for v in visible.split(",")] != [str(i) for i in range(visible_gpu_count())]:
        raise ConfigError(
            f"LAUNCHER=submitit_local gives its jobs GPUs 0..n-1 whatever CUDA_VISIBLE_DEVICES says ({visible!r}); "
            "unset CUDA_VISIBLE_DEVICES, or use LAUNCHER=joblib, which keeps it")


def check_plan(runs: list[PlannedRun], sweep_cfg, launcher: str | None, confirmed: bool) -> None:
    conflicts = [r for r in runs if r.action == "conflict"]
    if conflicts:
        shown = "\n  ".join(r.note for r in conflicts[:5])  # each note names its directory
        raise ConfigError(
            f"{len(conflicts)} run director{'y' if len(conflicts) == 1 else 'ies'} of this sweep hold runs of a "
            f"different config and would not be reused:\n  {shown}\n"
            "Give this sweep its own place (ARGS=\"runs_root=... \" or name=...) or delete those directories."
        )
    todo = sum(r.action in ("start", "resume") for r in runs)
    on_cpu = trains_on_cpu(sweep_cfg, launcher)
    _check_local_gpus(launcher)
    if todo > MAX_CPU_RUNS and on_cpu and not confirmed:
        raise ConfigError(
            f"this sweep would train {todo} runs on the CPU (more than {MAX_CPU_RUNS}); that takes hours. "
            "Set CONFIRM=1 to go ahead, or shrink it (a smaller EXP, or ARGS with fewer seeds / a smaller model)"
        )
    if launcher == "submitit_slurm" and not sweep_cfg.slurm.get("partition"):
        raise ConfigError(
            "LAUNCHER=submitit_slurm needs SLURM settings: set slurm.partition (and slurm.timeout_min, "
            "slurm.cpus_per_task, ...) in conf/local/default.yaml (copy conf/local/example.yaml) or in ARGS"
        )


def print_outcome(runs: list[PlannedRun], console: Console) -> dict[str, int]:
    """A table of what each run's result.json says now, and the runs counted by status (returned)."""
    table = Table(title="sweep summary")
    for col in ("run", "was", "status", "val loss", "tokens", "wall s"):
        table.add_column(col, justify="left" if col in ("run", "was", "status") else "right")
    counts: dict[str, int] = {}
    tokens = wall = 0.0
    for r in runs:
        try:
            result = RunResult.read(r.run_dir)
            status = result.status if result else "missing"
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
    return counts


def _launch(command: list[str], todo: list[PlannedRun], sweep_dir: Path, console: Console) -> None:
    """Hydra's multirun over exactly the planned jobs (the sweeper's jobs_file), through the chosen launcher."""
    jobs_file = sweep_dir / f".jobs-{os.getpid()}.json"
    write_json_atomic(jobs_file, [r.overrides for r in todo])
    try:
        proc = subprocess.run([*command, f"hydra.sweeper.jobs_file={jobs_file.resolve()}"],
                              env={**os.environ, SWEEP_ENV: str(sweep_dir)})  # each run prints the progress line
    finally:
        jobs_file.unlink(missing_ok=True)
    if proc.returncode != 0:
        console.print(f"[red]the sweep's training process exited with status {proc.returncode}[/red]")


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
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run (after --)")
    ns = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    console = Console(width=140)
    started = time.time()

    composed: dict = {}  # the jobs' Hydra compositions, reused when later rounds are planned
    only = parse_grids(ns.grids)
    if ns.restore is not None:
        sweep_dir = Path(sweep_config(ns.experiment, ns.launcher, ns.overrides).hydra.sweep.dir)
        console.print(f"restored {restore(ns.restore, sweep_dir)} finished runs from {ns.restore} into {sweep_dir}")
    runs, sweep_cfg = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
    counts = {a: sum(r.action == a for r in runs) for a in ("skip", "resume", "start", "conflict", "wait", "running")}
    running = f", {counts['running']} running elsewhere (not started again)" if counts["running"] else ""
    console.print(f"[bold]{ns.experiment}[/bold]: {len(runs)} runs: {counts['skip']} skipped (already done), "
                  f"{counts['resume']} resumed, {counts['start']} started{running}"
                  + (f", {counts['wait']} after the lr-tuning stage" if counts["wait"] else ""))
    if ns.dry_run:
        for r in runs:
            console.print(f"  {r.action:<8} {r.run_dir}  {' '.join(r.overrides)}  {r.note}")
        return
    check_plan(runs, sweep_cfg, ns.launcher, ns.confirm)

    sweep_dir = Path(sweep_cfg.hydra.sweep.dir)
    command = [sys.executable, "-m", "ffnbench.train", "-m", f"experiment={ns.experiment}",
               *launcher_overrides(ns.launcher), *ns.overrides]
    manifest = {
        "experiment": ns.experiment,
        "command": " ".join(["make sweep", f"EXP={ns.experiment}"]
                            + ([f"LAUNCHER={ns.launcher}"] if ns.launcher else [])
                            + ([f'ARGS="{" ".join(ns.overrides)}"'] if ns.overrides else [])),
        "train_command": " ".join(command[1:]),
        "runs": [str(r.run_dir) for r in runs],
        "flops": [r.flops for r in runs],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json_atomic(sweep_dir / SWEEP_MANIFEST, manifest)
    console.print(estimate([(r.run_dir, r.flops) for r in runs]).line())
    launched = False
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
        _launch(command, todo, sweep_dir, console)
        if not any(r.action == "wait" for r in runs):
            break
        runs, _ = plan(ns.experiment, ns.launcher, ns.overrides, composed, only)
        check_plan(runs, sweep_cfg, ns.launcher, ns.confirm)  # later rounds' runs get the first round's checks
        write_json_atomic(sweep_dir / SWEEP_MANIFEST, {**manifest, "runs": [str(r.run_dir) for r in runs],
                                                       "flops": [r.flops for r in runs]})
    elsewhere = [r for r in runs if r.action == "running"]
    if elsewhere:
        console.print(f"not started: {len(elsewhere)} runs are training elsewhere")
        for r in elsewhere:
            console.print(f"  running {r.note}: {r.run_dir}")
    if not launched and not elsewhere:
        console.print("nothing to train: every run is already done")
    statuses = print_outcome(runs, console)
    console.print(f"sweep wall time: {time.time() - started:.0f} s")
    if not ns.no_report:
        from ffnbench.report import write_report

        report = write_report(sweep_dir)
        console.print(f"report: {report}")
    if any(s not in FINAL_STATUSES for s in statuses):
        sys.exit(1)


if __name__ == "__main__":
    main()
