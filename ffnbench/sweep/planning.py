"""Every run of a sweep, its directory, and what rerunning it would do (skip, resume, start, wait for its
tuning runs, ...), from its jobs as jobs.py composes them; and the checks that refuse a plan that would waste or
lose work, before any run starts. Imports neither Lightning nor the training code."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from ffnbench.claims.lr_protocol import lr_protocol, neighbour_lrs
from ffnbench.config.compose import CONF_DIR, compose
from ffnbench.config.jobs import resolve_jobs
from ffnbench.errors import ConfigError, RunDirError
from ffnbench.model.model import ModelConfig
from ffnbench.runs.result import RESULT_FILE
from ffnbench.runs.rundir import RUN_CONFIG_FILE, lock_holder, plan_run
from ffnbench.sweep.arms import Arm, arm_grids
from ffnbench.sweep.jobs import ComposedJob, compose_jobs
from ffnbench.sweep.launchers import check_local_gpus, launcher_overrides, trains_on_cpu
from ffnbench.sweep.progress import planned_flops
from ffnbench.sweep.tuning import (
    TuningRun,
    TuningRuns,
    check_tuning,
    choose_lr,
    extension,
    is_tuned,
    is_tuning,
    tuning_group,
    with_lr,
)
from hydra_plugins.ffnbench_sweeper.grid_sweeper import grid_jobs

MAX_CPU_RUNS = 30  # more runs than this on a CPU needs CONFIRM=1: hours of work deserve a second look


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if not p.stem.startswith("_"))


def check_experiment(name: str) -> None:
    if name not in experiments():
        raise ConfigError(f"EXP={name}: no such experiment; known experiments: {', '.join(experiments())}")


@dataclass(frozen=True)
class Work:
    """What a run computes, for its price (ffnbench.sweep.cost): its model and its training tokens."""

    model: ModelConfig
    tokens: int
    size: str  # model.name: the model group `make gpu-check` prices per


@dataclass(frozen=True)
class PlannedRun:
    overrides: list[str]
    run_dir: Path
    # skip | resume | start | conflict | wait (for the tuning runs that choose its lr) | blocked (they cannot: all
    # diverged) | running (another process trains it now: not started again)
    action: str
    note: str = ""
    flops: float | None = None  # the training FLOPs its config asks for (progress.planned_flops); None while waiting
    tuned: bool = False  # its lr is the one its tuning runs chose (optim.lr=tuned)
    grid: int | None = None  # the preset's grid that names it (an extension: its tuning grid); None: no grids
    tuning: bool = False  # an lr-tuning run
    extension: bool = False  # a tuning run that bracketing added beyond its grid
    neighbours: int = 0  # waiting for its lr: the runs at the lr's neighbours its choice will add (judge_neighbours)
    group: frozenset | None = field(default=None, repr=False, compare=False)  # its tuning group (tuning.TuningRun.key)
    work: Work | None = field(default=None, repr=False, compare=False)  # what it computes; None: a job never composed
    config: dict | None = field(default=None, repr=False, compare=False)  # its resolved config (with its hardware)
    identity: frozenset | None = field(default=None, repr=False, compare=False)  # sweep.keys.config_key(config)
    duplicates: tuple[str, ...] = ()  # jobs of the same resolved config, planned as this run instead (their names)


def _is_sweep(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(override).is_sweep_override()


def sweep_config(experiment: str, launcher: str | None, args: list[str]):
    """The sweep's own composed config (its directory, sweeper and launcher), without its jobs."""
    check_experiment(experiment)
    base = [f"experiment={experiment}", *launcher_overrides(launcher)]
    return compose([*base, *(a for a in args if not _is_sweep(a))], return_hydra_config=True)


def preset_grids(sweep_cfg) -> list[tuple[dict, Arm | None]]:
    """The preset's grids, each with the arm it belongs to (None for a grid the preset spells out): its `grids`, then
    its comparisons crossed with the arms (ffnbench.sweep.arms)."""
    sweeper = sweep_cfg.hydra.sweeper
    grids = [(g, None) for g in (OmegaConf.to_container(sweeper.grids) if sweeper.get("grids") else [])]
    node = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in sweeper.items()
            if k in ("compare", "arms", "lr_centres", "tuning_seeds", "judged_seeds")}
    return grids + [(g.grid, g.arm) for g in arm_grids(node, str(sweep_cfg.model.name))]


def plan(experiment: str, launcher: str | None, args: list[str],
         composed_cache: dict | None = None, only_grids: list[int] | None = None) -> tuple[list[PlannedRun], dict]:
    """Every run of the sweep, its directory, and what rerunning it would do. Composes exactly what
    `python -m ffnbench.train -m experiment=EXP <args>` composes, job by job, and checks each job's settings as its
    run will (a ConfigError naming the job and the setting, before any work); a job whose lr comes from its tuning
    runs (`optim.lr: tuned`, see ffnbench.sweep.tuning) gets the lr they chose, or waits for them. Jobs of the same
    resolved config (config.identity) are one run: the first keeps its name, unless a later one's directory already
    holds its record. `composed_cache`: kept by a caller that plans again (after the tuning stage), so no job is
    composed twice."""
    sweep_cfg = sweep_config(experiment, launcher, args)
    launcher_args = launcher_overrides(launcher)
    sweeper = sweep_cfg.hydra.sweeper
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else None
    grids = [g for g, _ in preset_grids(sweep_cfg)] or None
    index = list(range(len(grids or [])))
    if only_grids is not None:  # a part of the preset (an arm of a campaign): the same runs, fewer of them
        bad = [i for i in only_grids if not grids or not 0 <= i < len(grids)]
        if bad:
            raise ConfigError(f"--grids: EXP={experiment} has {len(grids or [])} grids (0-{len(grids or []) - 1}); "
                              f"there is no grid {bad[0]}")
        grids, index = [grids[i] for i in only_grids], list(only_grids)
    jobs = [(index[g] if grids else None, job)
            for g, job in grid_jobs(params, grids, [f"experiment={experiment}", *args])]
    here = launcher != "submitit_slurm"  # where the runs resolve their device and precision: here, or a SLURM node
    composed = _dedupe(compose_jobs(jobs, launcher_args, here, composed_cache))
    tuning_runs = TuningRuns(TuningRun(c.config, c.run_dir) for c in composed if is_tuning(c.config))
    check_tuning([(c.config, c.run_dir.name) for c in composed if not is_tuning(c.config)], tuning_runs)
    extended = _bracket(composed, tuning_runs, launcher_args, here, composed_cache)
    composed += extended
    added = {c.run_dir for c in extended}
    groups = {t.run_dir: t.key for t in tuning_runs}
    runs: list[PlannedRun | None] = []
    resolved: dict[int, tuple[list[str], ComposedJob]] = {}  # position in `runs` → the job at its chosen lr
    asked: dict[Path, set[float]] = {}  # a judged job → the lrs its plan asks for now
    for c in composed:
        if not is_tuned(c.config):
            runs.append(_classify(c, tuning=is_tuning(c.config), extension=c.run_dir in added,
                                  group=groups.get(c.run_dir)))
            continue
        choice = choose_lr(c.config, tuning_runs)
        group = tuning_group(c.config, tuning_runs)
        neighbours = 2 if lr_protocol(c.config).judge_neighbours else 0
        if choice.lr is None:  # no lr yet, so no FLOPs: the run is not counted in the time left until it can run
            runs.append(PlannedRun(c.job, c.run_dir, "blocked" if choice.blocked else "wait",
                                   f"lr: {choice.describe()}", grid=c.grid, neighbours=neighbours,
                                   group=group[0].key if group else None, work=_work(c), config=c.config,
                                   identity=c.identity, duplicates=c.duplicates))
        else:
            lrs = (choice.lr, *neighbour_lrs(choice.lr)) if neighbours else (choice.lr,)
            asked[c.run_dir] = set(lrs)
            for lr in lrs:  # the chosen lr first: the run at it keeps its place (and its name) in the plan
                resolved[len(runs)] = (with_lr(c.job, lr), c)
                runs.append(None)
    tuned_jobs = compose_jobs([(c.grid, job) for job, c in resolved.values()], launcher_args, here, composed_cache)
    for (i, (_, origin)), c in zip(resolved.items(), tuned_jobs):
        group = tuning_group(origin.config, tuning_runs)
        runs[i] = dataclasses.replace(_classify(c, group=group[0].key if group else None), tuned=True,
                                      duplicates=origin.duplicates)
    judged = [c for c in composed if is_tuned(c.config)]
    runs += _judged_before(judged, tuning_runs, asked, Path(str(sweep_cfg.hydra.sweep.dir)), launcher_args, here,
                           composed_cache)
    return _unique([r for r in runs if r is not None]), sweep_cfg


def _judged_before(judged: list[ComposedJob], tuning_runs: TuningRuns, asked: dict[Path, set[float]],
                   sweep_dir: Path, launcher_args: list[str], here: bool, cache: dict | None) -> list[PlannedRun]:
    """The finished runs of judged jobs at lrs their plan does not ask for now: judged at an earlier choice of
    their lr (before their tuning grid grew and the choice waits again, or moved). They are the sweep's finished
    work and stay in its plan, as done: a published run keeps planning as skipped. Looked for at every lr of a job's
    tuning group and the neighbours of each (where judged runs can be), in run folders that exist: nothing to look
    for in a fresh sweep's folder."""
    existing = {p.name for p in sweep_dir.iterdir() if p.is_dir()} if sweep_dir.is_dir() else set()
    if not existing:
        return []
    candidates: list[tuple[ComposedJob, list[str]]] = []
    for c in judged:
        lrs: set[float] = set()
        for t in tuning_group(c.config, tuning_runs):
            lr = float(t.config["optim"]["lr"])
            lrs |= {lr, *neighbour_lrs(lr)}
        candidates += [(c, with_lr(c.job, lr)) for lr in sorted(lrs - asked.get(c.run_dir, set()))]
    named = resolve_jobs([[*job, *launcher_args] for _, job in candidates], cache)
    found = [(c, job) for (c, job), r in zip(candidates, named) if r.run_dir.name in existing]
    composed = compose_jobs([(c.grid, job) for c, job in found], launcher_args, here, cache)
    out = []
    for (origin, _), c in zip(found, composed):
        group = tuning_group(origin.config, tuning_runs)
        run = _classify(c, group=group[0].key if group else None)
        if run.action == "skip":
            out.append(dataclasses.replace(run, tuned=True, note=f"{run.note}, judged at an earlier choice of its lr"))
    return out


def _unique(runs: list[PlannedRun]) -> list[PlannedRun]:
    """One planned run per resolved config: a tuned job may be a run a grid names too (the same lr), and two
    judged jobs that differ in how their lr is chosen (lr_protocol) only are one run, at each lr either asks for.
    A waiting job keeps the most neighbours any of its copies will add."""
    unique: dict[tuple, PlannedRun] = {}
    for r in runs:
        key = (r.identity if r.identity is not None else r.run_dir, r.action in ("wait", "blocked"))
        kept = unique.get(key)
        if kept is None:
            unique[key] = r
        elif r.neighbours > kept.neighbours:
            unique[key] = dataclasses.replace(kept, neighbours=r.neighbours)
    return list(unique.values())


def _dedupe(composed: list[ComposedJob]) -> list[ComposedJob]:
    """The jobs with one job per resolved config (two grids that name the same run under two names, e.g.
    model.n_layer=12 beside model=base, whose n_layer is 12): the first in plan order is kept, unless a later one's
    directory holds a record (a published run keeps its name). Judged jobs whose lr their tuning runs choose are
    told apart by their lr_protocol too, which says which runs the choice adds (_unique merges their runs)."""
    kept: dict[tuple, int] = {}
    out: list[ComposedJob] = []
    for c in composed:
        protocol = str(sorted((c.config.get("lr_protocol") or {}).items())) if is_tuned(c.config) else None
        key = (c.identity, protocol)
        i = kept.get(key)
        if i is None:
            kept[key] = len(out)
            out.append(c)
        elif out[i].run_dir != c.run_dir:
            first, other = out[i], c
            if not _has_record(first.run_dir) and _has_record(other.run_dir):
                first, other = other, first
            out[i] = dataclasses.replace(first, duplicates=(*first.duplicates, other.run_dir.name, *other.duplicates))
    return out


def _has_record(run_dir: Path) -> bool:
    return (run_dir / RESULT_FILE).exists() or (run_dir / RUN_CONFIG_FILE).exists()


def _bracket(composed: list[ComposedJob], tuning_runs: list[TuningRun], launcher_args: list[str], here: bool,
             cache: dict | None) -> list[ComposedJob]:
    """The tuning jobs that bracketing adds (ffnbench.sweep.tuning.extension), composed, and added to `tuning_runs`:
    each round extends every grid whose choice sits at an edge by one step, until no choice moves (its new runs
    have no outcome yet, or the optimum is bracketed, or the cap is reached). A function of the finished runs, so
    planning again asks for the same runs."""
    jobs = {c.run_dir: c.job for c in composed if is_tuning(c.config)}
    grid_of = {c.run_dir: c.grid for c in composed if is_tuning(c.config)}
    judged = [c.config for c in composed if not is_tuning(c.config) and is_tuned(c.config)]
    steps: dict[frozenset, int] = {}  # tuning group → the steps its grid was extended by
    added: list[ComposedJob] = []
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
                new_jobs.append((group[0].key, grid_of.get(group[0].run_dir), extra))
        if not new_jobs:
            return added
        for key, grid, extra in new_jobs:
            steps[key] = steps.get(key, 0) + 1
            for c in compose_jobs([(grid, job) for job in extra], launcher_args, here, cache):
                jobs[c.run_dir] = c.job
                grid_of[c.run_dir] = grid
                tuning_runs.append(TuningRun(c.config, c.run_dir))
                added.append(c)


def _work(c: ComposedJob) -> Work:
    batch_size = int(c.config["data"]["batch_size"])
    tokens = c.spec.total_steps(batch_size * c.spec.model.seq_len) * batch_size * c.spec.model.seq_len
    return Work(c.spec.model, tokens, str(c.config["model"].get("name") or "custom"))


def _classify(c: ComposedJob, tuning: bool = False, extension: bool = False,
              group: frozenset | None = None) -> PlannedRun:
    """What the run will do with its directory: the run's own decision (rundir.plan_run), made ahead of time,
    with the device and precision it will resolve to where they can be known here (`c.undecided`: those that
    cannot). A run that another process trains now is left to it."""
    common = dict(flops=planned_flops(c.spec, int(c.config["data"]["batch_size"])), grid=c.grid, tuning=tuning,
                  extension=extension, group=group, work=_work(c), config=c.config, identity=c.identity,
                  duplicates=c.duplicates)
    holder = lock_holder(c.run_dir)
    if holder is not None:
        return PlannedRun(c.job, c.run_dir, "running", str(holder), **common)
    try:
        run = plan_run(c.run_dir, c.config, c.undecided)
    except RunDirError as e:
        return PlannedRun(c.job, c.run_dir, "conflict", str(e), **common)
    status = run.previous.status if run.previous else ""
    if run.action == "skip":
        return PlannedRun(c.job, c.run_dir, "skip", status, **common)
    if run.action == "resume":
        return PlannedRun(c.job, c.run_dir, "resume", f"from step {run.resumed_from}", **common)
    return PlannedRun(c.job, c.run_dir, "start", status, **common)


def run_count(runs: list[PlannedRun]) -> int:
    """The runs a plan will train or has trained: each planned run, and the runs at their lr's neighbours that the
    judged jobs still waiting for their lr will add. What the dry run's header and its cost block both count."""
    return len(runs) + sum(r.neighbours for r in runs if r.action in ("wait", "blocked"))


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
    check_local_gpus(launcher)
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
