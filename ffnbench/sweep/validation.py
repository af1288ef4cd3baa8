"""Every job of a sweep checked as `ffnbench.train` checks its run (train.check_run: settings, device, data
settings, batch split, logger), before any job starts: a job its run would refuse stops the sweep with one line
naming the job and the fix, exit 2, nothing written and nothing launched. The planner has checked what needs
neither Lightning nor the machine (jobs.check_settings, the dry run's checks); this adds the rest, once per
distinct config (its seed, lr and tuning role, which the planner checked for every job, aside)."""

from __future__ import annotations

from collections.abc import Sequence

from ffnbench.errors import ConfigError
from ffnbench.sweep.jobs import CHECK_LR
from ffnbench.sweep.keys import config_key
from ffnbench.sweep.planning import PlannedRun
from ffnbench.sweep.tuning import TUNING_FREE_KEYS, is_tuned

LAUNCHED = ("start", "resume", "wait")  # the runs a sweep will launch (now, or after the lr-tuning stage)


def check_jobs(runs: Sequence[PlannedRun], here: bool) -> int:
    """train.check_run on one job of each distinct config the sweep will launch; returns how many were checked.

    Args:
        runs: the plan.
        here: whether the runs start on this machine. A SLURM job starts on a node whose GPU this machine (a login
            node) may lack, and check_run resolves the device where it runs: there the planner's checks are all.
    Raises:
        ConfigError: the first job its run would refuse, named.
    """
    if not here:
        return 0
    from omegaconf import OmegaConf

    from ffnbench.runcheck import check_run

    seen: set[frozenset] = set()
    for r in runs:
        if r.action not in LAUNCHED or r.config is None:
            continue
        key = config_key(r.config, ignore=TUNING_FREE_KEYS)
        if key in seen:
            continue
        seen.add(key)
        config = {**r.config, "run_dir": str(r.run_dir)}
        if is_tuned(config):
            config["optim"] = {**config["optim"], "lr": CHECK_LR}
        try:
            check_run(OmegaConf.create(config))
        except ConfigError as e:
            raise ConfigError(f"job {r.run_dir.name} would be refused when it starts: {e}") from None
    return len(seen)
