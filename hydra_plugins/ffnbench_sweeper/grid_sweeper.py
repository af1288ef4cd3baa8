"""The grids of a sweep. Hydra's basic sweeper runs one cartesian product; ffnbench's GridSweeper runs a union.

A claim often needs several ("relu/gelu/swiglu at budget 4 over seeds, and gelu at widths 2 and 8"), so
experiment configs may give `hydra.sweeper.grids`, a list of grids; their runs are joined in order and a run
two grids share runs once. Command-line overrides apply to every grid and win over a grid's own value for the
same key. Launchers are untouched: basic, joblib and submitit all receive the same job lists.

`make sweep` plans before it launches (which runs are done, which wait for the lr-tuning stage, see
ffnbench.sweep.tuning) and hands the sweeper the exact jobs to launch in `jobs_file`, a JSON list of override lists;
without it (`python -m ffnbench.train -m experiment=...`) the grids are expanded here, and a judged job whose lr
comes from tuning runs (`optim.lr=tuned`) is left to `make sweep`, which can resolve it.

GridSweeper lives here because Hydra instantiates sweepers from the `hydra_plugins` namespace alone
(conf/hydra/sweeper/ffnbench.yaml). `make sweep`'s planner (ffnbench.sweep.planning) expands the grids with the
same `expand_grids`, so its dry run lists exactly the runs Hydra will launch."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

from ffnbench.errors import ConfigError


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list | tuple):
        return ",".join(_value(x) for x in v)
    return str(v)


def expand_grids(params: Mapping | None, grids: Sequence[Mapping] | None, arguments: Sequence[str],
                 config_loader: Any = None) -> list[list[str]]:
    """Every job's overrides, in launch order: each grid's cartesian product (with the command-line
    `arguments` applied to it), concatenated, duplicates dropped.

    Args:
        params: one grid, as Hydra's basic sweeper takes it ({key: "v1,v2"}), or None.
        grids: several grids ([{key: "v1,v2"}, ...]), or None; not both with `params`.
        arguments: the command-line overrides, applied to every grid.
        config_loader: Hydra's, when running inside Hydra (it expands glob sweeps).
    """
    if params and grids:
        raise ConfigError("hydra.sweeper: give `params` (one grid) or `grids` (several), not both")
    parser = OverridesParser.create(config_loader=config_loader)
    jobs: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for grid in list(grids or []) or [params or {}]:
        lines = [f"{k}={_value(v)}" for k, v in dict(grid).items()] + list(arguments)
        for job in BasicSweeper.split_arguments(parser.parse_overrides(lines), None)[0]:
            key = tuple(sorted(job))
            if key not in seen:
                seen.add(key)
                jobs.append(job)
    return jobs


class GridSweeper(BasicSweeper):
    """Hydra's basic sweeper over the union of `grids` (or the one grid `params`)."""

    def __init__(self, max_batch_size: int | None = None, params: Mapping | None = None,
                 grids: Sequence[Mapping] | None = None, jobs_file: str | None = None,
                 compare: Sequence[Mapping] | None = None, arms: Mapping | None = None,
                 lr_centres: Mapping | None = None, tuning_seeds: str | None = None, judged_seeds: str | None = None):
        super().__init__(max_batch_size=max_batch_size, params=dict(params or {}))
        self.grids = [dict(g) for g in grids] if grids else None
        self.jobs_file = jobs_file
        # a claim experiment's comparisons, crossed with the arms (ffnbench.sweep.arms) when the sweep starts
        self.arms = {"compare": compare, "arms": arms, "lr_centres": lr_centres, "tuning_seeds": tuning_seeds,
                     "judged_seeds": judged_seeds}

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        if self.jobs_file:
            jobs = [list(job) for job in json.loads(Path(self.jobs_file).read_text())]
        else:
            grids = self.grids
            if self.arms["compare"]:
                from ffnbench.sweep.arms import arm_grids

                grids = [*(grids or []), *(g.grid for g in arm_grids(self.arms, str(self.config.model.name)))]
            jobs = expand_grids(self.params, grids, arguments, self.hydra_context.config_loader)
            tuned = [job for job in jobs if "optim.lr=tuned" in job]
            if tuned:
                print(f"ffnbench: {len(tuned)} runs take their lr from tuning runs (optim.lr=tuned) and are not "
                      "launched here: `make sweep` (python -m ffnbench.sweep) runs the tuning stage, then them",
                      file=sys.stderr)
                jobs = [job for job in jobs if job not in tuned]
        self.overrides = list(self.split_overrides_to_chunks(jobs, self.max_batch_size))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns = []
        initial_job_idx = 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            returns.append(self.launcher.launch(batch, initial_job_idx=initial_job_idx))
            initial_job_idx += len(batch)
        failed = [" ".join(r.overrides or []) for batch in returns for r in batch or []
                  if r.status == JobStatus.FAILED or getattr(r, "_return_value", None) == "failed"]
        if failed:  # the sweep goes on past a failed job, and then says which did not finish
            print(f"ffnbench: {len(failed)} job(s) of this sweep failed (their result.json says why; rerun the sweep "
                  "to retry them):\n  " + "\n  ".join(failed), file=sys.stderr)
            sys.exit(1)
        return returns
