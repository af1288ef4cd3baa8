"""The union-of-grids expansion the Hydra sweeper (GridSweeper) and the sweep planner share."""

import pytest

from ffnbench.errors import ConfigError
from hydra_plugins.ffnbench_sweeper.grid_sweeper import expand_grids


def test_one_grid_is_the_cartesian_product():
    jobs = expand_grids({"ffn": "relu,gelu", "seed": "0,1"}, None, [])
    assert sorted(map(sorted, jobs)) == sorted(map(sorted, [["ffn=relu", "seed=0"], ["ffn=relu", "seed=1"],
                                                            ["ffn=gelu", "seed=0"], ["ffn=gelu", "seed=1"]]))


def test_grids_are_joined_and_shared_runs_run_once():
    grids = [{"ffn": "relu,gelu", "ffn.budget": 4}, {"ffn": "gelu", "ffn.budget": "4,8"}]
    jobs = expand_grids(None, grids, ["seed=0"])
    assert [sorted(j) for j in jobs] == [sorted(j) for j in [
        ["ffn=relu", "ffn.budget=4", "seed=0"], ["ffn=gelu", "ffn.budget=4", "seed=0"],
        ["ffn=gelu", "ffn.budget=8", "seed=0"]]]


def test_command_line_values_win_and_booleans_are_hydra_booleans():
    jobs = expand_grids(None, [{"ffn.bias": True, "seed": "0,1,2"}], ["seed=5"])
    assert len(jobs) == 1 and "seed=5" in jobs[0]
    assert any(j.lower() == "ffn.bias=true" for j in jobs[0])


def test_params_and_grids_together_are_refused():
    with pytest.raises(ConfigError, match="not both"):
        expand_grids({"seed": "0"}, [{"seed": "1"}], [])


def test_the_sweeper_config_names_this_class():
    from omegaconf import OmegaConf

    from ffnbench.config.compose import CONF_DIR
    from hydra_plugins.ffnbench_sweeper.grid_sweeper import GridSweeper

    target = OmegaConf.load(CONF_DIR / "hydra" / "sweeper" / "ffnbench.yaml")["_target_"]
    assert target == f"{GridSweeper.__module__}.{GridSweeper.__qualname__}"
