"""The Hydra launchers a sweep runs through: the override that selects one (after checking its plugin is
installed), whether the runs will train on a CPU, and the GPUs submitit's local executor hands out."""

from __future__ import annotations

import importlib.util
import os

from ffnbench.errors import ConfigError
from ffnbench.placement import resolve_accelerator

LAUNCHERS = {
    "basic": None,
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "hydra-joblib-launcher"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
}
# ours wrap submitit's (conf/hydra/launcher/): SLURM settings from `slurm:`, and the GPUs for the local executor
LAUNCHER_CONFIG = {"submitit_slurm": "slurm", "submitit_local": "local"}


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


def check_local_gpus(launcher: str | None) -> None:
    """submitit's local executor gives its jobs GPUs 0..n-1 (it writes CUDA_VISIBLE_DEVICES itself): a subset
    chosen with CUDA_VISIBLE_DEVICES would be ignored."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if launcher != "submitit_local" or not visible or not visible.strip():
        return
    from ffnbench.placement import visible_gpu_count

    if [v.strip() for v in visible.split(",")] != [str(i) for i in range(visible_gpu_count())]:
        raise ConfigError(
            f"LAUNCHER=submitit_local gives its jobs GPUs 0..n-1 whatever CUDA_VISIBLE_DEVICES says ({visible!r}); "
            "unset CUDA_VISIBLE_DEVICES, or use LAUNCHER=joblib, which keeps it")


def slurm_arrays(runs, cfg, hours=None) -> list[str]:
    """What `--launcher submitit_slurm` submits, for a dry run. Hydra's submitit launcher maps each multirun onto one
    SLURM job array, and a sweep launches one multirun per round (sweep.cli): round 1 holds the runs that can start
    now (tuning runs, fixed-lr runs, interrupted ones), each later round the runs the finished tuning runs unlock
    (grid extensions that bracket an optimum, then the judged runs at the chosen lrs). `runs`: the planned runs
    (sweep.planning.PlannedRun); `cfg`: the sweep's composed config; `hours(run)`: one GPU's hours for a planned run
    (sweep.cost.Price; None for a run it cannot price), to compare the longest run with the time limit (None: not
    priced)."""
    launcher, slurm = cfg.hydra.launcher, cfg.slurm
    now = [r for r in runs if r.action in ("start", "resume")]
    later = [r for r in runs if r.action == "wait"]
    where = ", ".join(f"{k} {slurm.get(k)}" for k in ("partition", "account", "qos") if slurm.get(k)) \
        or "partition not set (slurm.partition in conf/local/default.yaml)"
    gpus = int(launcher.nodes) * int(launcher.gpus_per_node)
    task = (f"{launcher.nodes} node × {launcher.gpus_per_node} GPU, {launcher.tasks_per_node} task/node, "
            f"{launcher.cpus_per_task} CPUs and {launcher.mem_gb} GB per task, time limit {launcher.timeout_min} "
            f"min (requeued up to {launcher.max_num_timeout}×, resuming from its checkpoint)")
    lines = [f"submitit_slurm ({where}): each job {task}",
             f"  round 1: one job array of {len(now)} jobs, at most {launcher.array_parallelism} running at once"]
    if later:
        lines.append(f"  later rounds: one job array per round for the {len(later)} runs waiting on their tuning runs "
                     "(grid extensions where a choice sits at an edge, then the judged runs), submitted as each round "
                     "ends")
    priced = [(h, r) for r in (*now, *later) if hours is not None and (h := hours(r)) is not None]
    if priced:
        run_hours, longest = max(priced, key=lambda p: p[0])
        minutes = run_hours / gpus * 60
        limit = float(launcher.timeout_min) * (1 + int(launcher.max_num_timeout))
        verdict = ("within one time limit" if minutes <= float(launcher.timeout_min) else
                   "needs requeues" if minutes <= limit else "exceeds the time limit with every requeue: raise "
                                                             "slurm.timeout_min")
        lines.append(f"  longest run ≈ {minutes:.0f} min on {gpus} GPU(s) ({longest.run_dir.name}): {verdict}")
    return lines
