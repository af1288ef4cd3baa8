"""The grids of a sweep: Hydra's basic sweeper runs one cartesian product; ffnbench's runs a union of them.

A claim often needs several ("relu/gelu/swiglu at budget
4 over seeds, and gelu at widths 2 and 8"), so experiment configs may give `hydra.sweeper.grids`, a list
of grids; their runs are joined in order and a run two grids share runs once. Command-line overrides apply
to every grid and win over a grid's own value for the same key. Launchers are untouched: basic, joblib and
submitit all receive the same job lists. The Hydra plugin class is hydra_plugins.ffnbench_sweeper.GridSweeper
(Hydra only loads plugins from that namespace); `make sweep`'s planner expands the same grids with the same
function, so its dry run lists exactly the runs Hydra will launch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

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
    `arguments` applied to it), concatenated, duplicates dropped."""
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
