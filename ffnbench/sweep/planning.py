"""Every run of a sweep, its directory, and what rerunning it would do (skip, resume, start, wait for its
tuning runs, ...), composed exactly as Hydra's multirun composes it; and the checks that refuse a plan that
would waste or lose work, before any run starts. Imports neither Lightning nor the training code."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf, open_dict

from ffnbench.claims.lr_protocol import check_protocols, lr_protocol, neighbour_lrs
from ffnbench.config.compose import CONF_DIR, compose, compose_many
from ffnbench.config.identity import HARDWARE_KEYS, with_hardware
from ffnbench.config.schema import RunSpec, run_spec, to_container, trainer_config
from ffnbench.data.tokenizer import vocab_size_for
from ffnbench.errors import ConfigError, RunDirError
from ffnbench.placement import planned_device_setup
from ffnbench.runs.rundir import lock_holder, plan_run
from ffnbench.sweep.arms import Arm, arm_grids
from ffnbench.sweep.launchers import check_local_gpus, launcher_overrides, trains_on_cpu
from ffnbench.sweep.progress import planned_flops
from ffnbench.sweep.tuning import (
    TuningRun,
    check_tuning,
    choose_lr,
    extension,
    is_tuned,
    is_tuning,
    tuning_group,
    with_lr,
)
from hydra_plugins.ffnbench_sweeper.grid_sweeper import expand_grids

MAX_CPU_RUNS = 30  # more runs than this on a CPU needs CONFIRM=1: hours of work deserve a second look


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if not p.stem.startswith("_"))


def check_experiment(name: str) -> None:
    if name not in experiments():
        raise ConfigError(f"EXP={name}: no such experiment; known experiments: {', '.join(experiments())}")


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


@dataclass(frozen=True)
class ComposedJob:
    """One job of the sweep, composed as Hydra's multirun composes it, its settings read once.

    Attributes:
        job: its overrides.
        run_dir: its run directory.
        config: its resolved config, with the device and precision the run will resolve to where they can be known
            here (config.identity.with_hardware): what its run directory's record is matched against.
        undecided: the hardware keys (config.identity.HARDWARE_KEYS) only the node it starts on can decide.
        spec: its settings (config.schema.run_spec); None while its lr is its tuning runs' to choose, or when a
            setting is one its run will refuse when it starts (the run says why; the plan does not stop for it).
    """

    job: list[str]
    run_dir: Path
    config: dict
    undecided: list[str]
    spec: RunSpec | None


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
    `python -m ffnbench.train -m experiment=EXP <args>` composes, job by job; a job whose lr comes from its
    tuning runs (`optim.lr: tuned`, see ffnbench.sweep.tuning) gets the lr they chose, or waits for them.
    `composed_cache`: kept by a caller that plans again (after the tuning stage), so no job is composed twice."""
    sweep_cfg = sweep_config(experiment, launcher, args)
    launcher_args = launcher_overrides(launcher)
    sweeper = sweep_cfg.hydra.sweeper
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else None
    grids = [g for g, _ in preset_grids(sweep_cfg)] or None
    if only_grids is not None:  # a part of the preset (an arm of a campaign): the same runs, fewer of them
        bad = [i for i in only_grids if not grids or not 0 <= i < len(grids)]
        if bad:
            raise ConfigError(f"--grids: EXP={experiment} has {len(grids or [])} grids (0-{len(grids or []) - 1}); "
                              f"there is no grid {bad[0]}")
        grids = [grids[i] for i in only_grids]
    jobs = expand_grids(params, grids, [f"experiment={experiment}", *args])
    here = launcher != "submitit_slurm"  # where the runs resolve their device and precision: here, or a SLURM node
    composed = _compose_jobs(jobs, launcher_args, here, composed_cache)
    tuning_runs = [TuningRun(c.config, c.run_dir) for c in composed if is_tuning(c.config)]
    check_tuning([(c.config, c.run_dir.name) for c in composed if not is_tuning(c.config)], tuning_runs)
    composed += _bracket(composed, tuning_runs, launcher_args, here, composed_cache)
    runs: list[PlannedRun | None] = []
    resolved: dict[int, list[str]] = {}  # position in `runs` → the job with its chosen lr
    for c in composed:
        if not is_tuned(c.config):
            runs.append(_classify(c))
            continue
        choice = choose_lr(c.config, tuning_runs)
        if choice.lr is None:  # no spec yet, so no FLOPs: the run is not counted in the time left until it can run
            runs.append(PlannedRun(c.job, c.run_dir, "blocked" if choice.blocked else "wait",
                                   f"lr: {choice.describe()}"))
        else:
            lrs = (choice.lr, *neighbour_lrs(choice.lr)) if lr_protocol(c.config).judge_neighbours else (choice.lr,)
            for lr in lrs:  # the chosen lr first: the run at it keeps its place (and its name) in the plan
                resolved[len(runs)] = with_lr(c.job, lr)
                runs.append(None)
    for i, c in zip(resolved, _compose_jobs(list(resolved.values()), launcher_args, here, composed_cache)):
        runs[i] = dataclasses.replace(_classify(c), tuned=True)
    unique: dict[Path, PlannedRun] = {}  # a tuned job may be a run a grid names too (the same lr): it runs once
    for r in runs:
        if r is not None:
            unique.setdefault(r.run_dir, r)
    return list(unique.values()), sweep_cfg


def _bracket(composed: list[ComposedJob], tuning_runs: list[TuningRun], launcher_args: list[str], here: bool,
             cache: dict | None) -> list[ComposedJob]:
    """The tuning jobs that bracketing adds (ffnbench.sweep.tuning.extension), composed, and added to `tuning_runs`:
    each round extends every grid whose choice sits at an edge by one step, until no choice moves (its new runs
    have no outcome yet, or the optimum is bracketed, or the cap is reached). A function of the finished runs, so
    planning again asks for the same runs."""
    jobs = {c.run_dir: c.job for c in composed if is_tuning(c.config)}
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
                new_jobs.append((group[0].key, extra))
        if not new_jobs:
            return added
        for key, extra in new_jobs:
            steps[key] = steps.get(key, 0) + 1
            for c in _compose_jobs(extra, launcher_args, here, cache):
                jobs[c.run_dir] = c.job
                tuning_runs.append(TuningRun(c.config, c.run_dir))
                added.append(c)


def _compose_jobs(jobs: list[list[str]], launcher_args: list[str], here: bool,
                  cache: dict | None = None) -> list[ComposedJob]:
    """Each job composed as Hydra's multirun composes it, its settings read once, with the device and precision
    the run will resolve (`here`: on this machine; else on a node, so the keys only it can decide are left
    undecided)."""
    out = []
    for job, cfg in zip(jobs, compose_many([[*job, *launcher_args] for job in jobs], return_hydra_config=True,
                                                 cache=cache)):
        run_dir = Path(cfg.hydra.sweep.dir) / str(cfg.hydra.sweep.subdir)
        with open_dict(cfg):
            del cfg["hydra"]  # runtime-only keys (output_dir) cannot be resolved outside a running job
        config = to_container(cfg)
        check_protocols(config)
        spec = _read_spec(config)
        # a trainer setting the run would refuse stops the plan here, whatever else its spec lacks
        trainer = spec.trainer if spec is not None else trainer_config(config["trainer"])
        hardware = planned_device_setup(trainer, here)
        undecided = [key for key, value in zip(HARDWARE_KEYS, hardware) if value is None]
        out.append(ComposedJob(job, run_dir, with_hardware(config, *hardware), undecided, spec))
    return out


def _read_spec(config: dict) -> RunSpec | None:
    """The job's RunSpec; None while its lr is its tuning runs' to choose, or when its run will refuse a setting
    when it starts (the run says which and why)."""
    if is_tuned(config):
        return None
    try:
        return run_spec(config, vocab_size_for(config["data"]))
    except (ConfigError, KeyError, TypeError, ValueError):
        return None


def _flops(c: ComposedJob) -> float | None:
    """The training FLOPs the job asks for (progress.planned_flops); None when its spec or batch size is unknown."""
    if c.spec is None:
        return None
    try:
        batch_size = int(c.config["data"]["batch_size"])
    except (KeyError, TypeError, ValueError):
        return None
    return planned_flops(c.spec, batch_size)


def _classify(c: ComposedJob) -> PlannedRun:
    """What the run will do with its directory: the run's own decision (rundir.plan_run), made ahead of time,
    with the device and precision it will resolve to where they can be known here (`c.undecided`: those that
    cannot). A run that another process trains now is left to it."""
    holder = lock_holder(c.run_dir)
    if holder is not None:
        return PlannedRun(c.job, c.run_dir, "running", str(holder))
    try:
        run = plan_run(c.run_dir, c.config, c.undecided)
    except RunDirError as e:
        return PlannedRun(c.job, c.run_dir, "conflict", str(e))
    status = run.previous.status if run.previous else ""
    flops = _flops(c)
    if run.action == "skip":
        return PlannedRun(c.job, c.run_dir, "skip", status, flops)
    if run.action == "resume":
        return PlannedRun(c.job, c.run_dir, "resume", f"from step {run.resumed_from}", flops)
    return PlannedRun(c.job, c.run_dir, "start", status, flops)


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
