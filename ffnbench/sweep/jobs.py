"""A sweep's jobs composed exactly as Hydra's multirun composes them (config.jobs), each one's settings read and
checked once, from the config alone, with the device and precision its run will resolve to: what the planner
(planning.py) decides every run's action from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ffnbench.claims.lr_protocol import check_protocols
from ffnbench.config.identity import HARDWARE_KEYS, with_hardware
from ffnbench.config.jobs import resolve_jobs
from ffnbench.config.schema import RunSpec, run_spec
from ffnbench.data.batches import check_windows
from ffnbench.data.config import data_config
from ffnbench.data.tokenizer import vocab_size_for
from ffnbench.errors import ConfigError
from ffnbench.placement import planned_device_setup
from ffnbench.sweep.keys import config_key
from ffnbench.sweep.tuning import is_tuned

CHECK_LR = 1e-3  # the lr a judged job's settings are checked and priced at while its tuning runs choose its own


@dataclass(frozen=True)
class ComposedJob:
    """One job of the sweep, composed as Hydra's multirun composes it, its settings read and checked once.

    Attributes:
        job: its overrides.
        run_dir: its run directory.
        config: its resolved config, with the device and precision the run will resolve to where they can be known
            here (config.identity.with_hardware): what its run directory's record is matched against.
        undecided: the hardware keys (config.identity.HARDWARE_KEYS) only the node it starts on can decide.
        spec: its settings (config.schema.run_spec); a job whose lr its tuning runs choose is read at CHECK_LR.
        grid: the index of the preset's grid that names it (None for a sweep without grids).
        identity: what makes it the run it is (config.identity.identity_key of `config`).
        duplicates: the names of jobs dropped as the same run.
    """

    job: list[str]
    run_dir: Path
    config: dict
    undecided: list[str]
    spec: RunSpec
    grid: int | None
    identity: frozenset
    duplicates: tuple[str, ...] = ()


def compose_jobs(jobs: list[tuple[int | None, list[str]]], launcher_args: list[str], here: bool,
                  cache: dict | None = None) -> list[ComposedJob]:
    """Each job composed as Hydra's multirun composes it (config.jobs), its settings read and checked once, with the
    device and precision the run will resolve (`here`: on this machine; else on a node, so the keys only it can
    decide are left undecided). A job whose settings its run would refuse is a ConfigError naming it (the first such
    job, and how many share its problem)."""
    out = []
    refused: list[tuple[str, str]] = []
    resolved = resolve_jobs([[*job, *launcher_args] for _, job in jobs], cache)
    for (grid, job), r in zip(jobs, resolved):
        config = r.config
        try:
            check_protocols(config)
            spec = check_settings(config)
        except ConfigError as e:
            refused.append((r.run_dir.name, str(e)))
            continue
        hardware = planned_device_setup(spec.trainer, here)
        undecided = [key for key, value in zip(HARDWARE_KEYS, hardware) if value is None]
        config = with_hardware(config, *hardware)
        out.append(ComposedJob(job, r.run_dir, config, undecided, spec, grid, config_key(config)))
    if refused:
        name, error = refused[0]
        same = sum(e == error for _, e in refused) - 1
        others = len(refused) - 1 - same
        more = (f" (and {same} more job{'s' * (same != 1)} of this sweep)" if same else "") + \
            (f"; {others} other job{'s' * (others != 1)} refused for other settings" if others else "")
        raise ConfigError(f"job {name} would be refused when it starts{more}: {error}")
    return out


def check_settings(config: dict) -> RunSpec:
    """The checks a run makes of its settings from the config alone (ffnbench.train.check_run's, less those that
    need Lightning or the machine a run starts on: the sweep CLI runs check_run itself before it launches): its
    settings (config.schema.run_spec), its data settings (data.config) and the batch's split into windows. A job
    whose lr its tuning runs choose is checked at CHECK_LR."""
    checked = config
    if is_tuned(config):
        checked = {**config, "optim": {**config["optim"], "lr": CHECK_LR}}
    spec = run_spec(checked, vocab_size_for(config["data"]))
    check_windows(data_config(config["data"]), spec.model.seq_len)
    return spec
