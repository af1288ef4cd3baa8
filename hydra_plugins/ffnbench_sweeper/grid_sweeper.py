"""GridSweeper: Hydra's basic sweeper over a union of grids. The logic is in ffnbench.sweeper; this class only
has to live here because Hydra instantiates sweepers from the `hydra_plugins` namespace alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf

from ffnbench.sweeper import expand_grids


class GridSweeper(BasicSweeper):
    def __init__(self, max_batch_size: int | None = None, params: Mapping | None = None,
                 grids: Sequence[Mapping] | None = None):
        super().__init__(max_batch_size=max_batch_size, params=dict(params or {}))
        self.grids = [dict(g) for g in grids] if grids else None

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        jobs = expand_grids(self.params, self.grids, arguments, self.hydra_context.config_loader)
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
        return returns
