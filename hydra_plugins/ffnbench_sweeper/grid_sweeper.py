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

ERROR_PREFIX = "ffnbench: error: "  # how ffnbench.train says why it refused a run before it started
REFUSED_SUFFIX = ".refused.json"  # beside `jobs_file`: the jobs refused before they started, and why


def refusals_file(jobs_file: str | Path) -> Path:
    """Where the sweeper leaves the jobs of `jobs_file` that were refused before they started (a JSON list of
    [the job's index in `jobs_file`, the error line]), for `make sweep` to say why beside its summary."""
    return Path(str(jobs_file) + REFUSED_SUFFIX)


class _ErrorLines:
    """sys.stderr, passed through, remembering the last error line ffnbench printed on it."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._partial = ""
        self.last: str | None = None

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.startswith(ERROR_PREFIX):
                self.last = line[len(ERROR_PREFIX):]
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class RecordRefusals:
    """The sweep's task function (ffnbench.train's), returning `("failed", why)` for a job whose run refused to start
    (train prints its one error line, removes the folder Hydra made for it and returns "failed"): a run refused
    before it wrote anything has no result.json to say why, so the error line is kept for the sweep's summary."""

    def __init__(self, task_function: Any):
        self.task_function = task_function

    def __call__(self, cfg: Any) -> Any:
        errors = _ErrorLines(sys.stderr)
        sys.stderr = errors
        try:
            out = self.task_function(cfg)
        finally:
            sys.stderr = errors._stream
        return ("failed", errors.last) if out == "failed" and errors.last else out


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
    return [job for _, job in grid_jobs(params, grids, arguments, config_loader)]


def grid_jobs(params: Mapping | None, grids: Sequence[Mapping] | None, arguments: Sequence[str],
              config_loader: Any = None) -> list[tuple[int, list[str]]]:
    """expand_grids' jobs, each with the index of the grid that names it first (0 for `params`)."""
    if params and grids:
        raise ConfigError("hydra.sweeper: give `params` (one grid) or `grids` (several), not both")
    parser = OverridesParser.create(config_loader=config_loader)
    jobs: list[tuple[int, list[str]]] = []
    seen: set[tuple[str, ...]] = set()
    for index, grid in enumerate(list(grids or []) or [params or {}]):
        lines = [f"{k}={_value(v)}" for k, v in dict(grid).items()] + list(arguments)
        for job in BasicSweeper.split_arguments(parser.parse_overrides(lines), None)[0]:
            key = tuple(sorted(job))
            if key not in seen:
                seen.add(key)
                jobs.append((index, job))
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

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        super().setup(hydra_context=hydra_context, task_function=RecordRefusals(task_function), config=config)

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
        failed, refused = [], []
        for index, r in enumerate(r for batch in returns for r in batch or []):  # the jobs' order, batch by batch
            value = getattr(r, "_return_value", None)
            if isinstance(value, tuple) and value[:1] == ("failed",):
                refused.append((index, list(r.overrides or []), str(value[1])))
            elif r.status == JobStatus.FAILED or value == "failed":
                failed.append(" ".join(r.overrides or []))
        if self.jobs_file and refused:
            refusals_file(self.jobs_file).write_text(json.dumps([[index, why] for index, _, why in refused]))
        if failed or refused:  # the sweep goes on past a failed job, and then says which did not finish, and why
            lines = [f"{' '.join(job)}: refused before it started (no run folder): {why}" for _, job, why in refused]
            lines += [f"{job}: failed (its result.json says why)" for job in failed]
            print(f"ffnbench: {len(lines)} job(s) of this sweep did not finish (rerun the sweep to retry them):\n  "
                  + "\n  ".join(lines), file=sys.stderr)
            sys.exit(1)
        return returns
