"""A sweep's jobs resolved without a Hydra composition each (ffnbench.config.jobs): the same config, value for value
and type for type, and the same run directory as Hydra composes for each job, for every preset's jobs and the
overrides the fast path leaves to Hydra; one Hydra composition per set of config groups."""

import pytest
from fixtures.sweep.runs import preset_jobs
from omegaconf import OmegaConf, open_dict

from ffnbench.config.jobs import resolve_jobs
from ffnbench.errors import ConfigError


def _by_hydra(overrides: list[str]) -> tuple[dict, str]:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from ffnbench.config.compose import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = hydra_compose(config_name="train", overrides=overrides, return_hydra_config=True)
    run_dir = f"{cfg.hydra.sweep.dir}/{cfg.hydra.sweep.subdir}"
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False), run_dir


def _typed(node):
    """A config with each leaf's type beside its value: 1, 1.0 and True are told apart."""
    if isinstance(node, dict):
        return {k: _typed(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_typed(v) for v in node]
    return type(node).__name__, node


def test_each_job_resolves_to_what_hydra_composes_for_it():
    jobs = []
    for name, every in (("quick", 1), ("cpu_robust", 60), ("lr", 4), ("full", 400), ("cpu_robust_more", 11)):
        jobs += preset_jobs(name)[::every]
    jobs += [  # launchers, sweeper and launcher settings, strings that look like numbers, keys the fast path leaves
        # to Hydra: additions, deletions, dict values, hydra.sweep/job settings, interpolations
        ["experiment=quick", "seed=3", "hydra/launcher=local", "runs_root=/tmp/elsewhere", "name=x"],
        ["experiment=full", "model=base", "model.n_layer=12", "ffn=relu", "hydra.sweeper.params={ffn: relu}"],
        ["ffn=swiglu", "ffn.budget=8/3", "data.cache_dir=/tmp/c", "optim.lr=1e-3", "tuning=true", "logger=csv"],
        ["ffn=relu", "+foo=1", "~optim.weight_decay"], ["model=micro", "optim={lr: 0.01, weight_decay: 0.0}"],
        ["hydra.sweep.dir=/tmp/elsewhere", "seed=1"], ["hydra.job.config.override_dirname.kv_sep=:", "seed=2"],
        ["data.path=${oc.env:HOME}/corpus.txt", "data=text_files"], ["trainer.max_steps=4", "ffn.width=2"],
    ]
    assert len(jobs) > 60
    for job, fast in zip(jobs, resolve_jobs(jobs)):
        config, run_dir = _by_hydra(job)
        assert _typed(fast.config) == _typed(config), job
        assert str(fast.run_dir) == run_dir, job
        assert fast.overrides == tuple(job)


def test_a_sweeps_jobs_cost_one_hydra_composition_per_set_of_config_groups(monkeypatch):
    import hydra

    calls = []
    real = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda **kw: calls.append(kw["overrides"]) or real(**kw))
    cache: dict = {}
    jobs = [["experiment=quick", f"ffn={act}", f"seed={seed}", f"optim.lr={lr}"]
            for act in ("relu", "gelu") for seed in range(3) for lr in (1e-3, 2e-3)]
    first = resolve_jobs(jobs, cache)
    assert calls == [["experiment=quick", "ffn=relu"], ["experiment=quick", "ffn=gelu"]]
    assert len({r.run_dir for r in first}) == 12
    first[0].config["seed"] = 99  # each job's config is its own copy
    again = resolve_jobs(jobs[:1], cache)
    assert again[0].config["seed"] == 0 and len(calls) == 2  # resolved again from the cache, nothing composed


def test_a_job_hydra_refuses_gets_hydras_error_in_one_line():
    for job in (["seed=0", "optim.nope=1"], ["ffn=nope"], ["ffn=relu", "+optim.lr=1"]):
        with pytest.raises(ConfigError) as info:
            resolve_jobs([["ffn=gelu"], job])
        assert "\n" not in str(info.value) and ("optim" in str(info.value) or "ffn/nope" in str(info.value))
