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
