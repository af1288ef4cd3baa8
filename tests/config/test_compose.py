"""Hydra composition: run names and what they leave out, one-line composition errors, command lines checked before
Hydra starts, composing many override lists at once."""

import hashlib

import pytest

from ffnbench.config.compose import MAX_NAME_EXTRAS, check_overrides, compose, compose_many, run_name
from ffnbench.errors import ConfigError


def test_run_names_say_the_ffn_and_seed_and_stay_short():
    assert run_name("swiglu", None, 4, False, 1, "none", 0, "") == "swiglu-b4-nobias-s0"
    assert run_name("gelu", 8, None, True, 64, "tanh", 2, "optim.lr=0.01") == "gelu-w8-bias-m64-tanh-optim.lr=0.01-s2"
    long = ",".join(f"key{i}=value{i}" for i in range(20))
    name = run_name("relu", 2, None, False, 1, "none", 1, long)
    assert len(name) < 40 and name.startswith("relu-w2-nobias-o") and name.endswith("-s1")
    assert name == "relu-w2-nobias-o2b296ae52d-s1"  # a hash of the overrides: stable, so a rerun finds it
    assert len(long) > MAX_NAME_EXTRAS


def test_a_long_data_path_names_the_run_by_its_files_stem_and_a_hash_of_the_path():
    deep = "/home/me/some/very/long/path/to/corpora/collection/of/my_novels_2024.txt"
    name = run_name("gelu", None, 4, False, 1, "none", 0, f"data.path={deep},data=text_files")
    digest = hashlib.blake2b(deep.encode(), digest_size=3).hexdigest()
    assert name == f"gelu-b4-nobias-data.path=my_novels_2024-{digest}-data=text_files-s0"
    other = run_name("gelu", None, 4, False, 1, "none", 0, f"data.path={deep.replace('of', 'for')},data=text_files")
    assert other != name and other.startswith("gelu-b4-nobias-data.path=my_novels_2024-")  # another file, same stem
    # too long even so: the stem, then the hash of all the overrides
    long = ",".join(f"key{i}=value{i}" for i in range(20))
    assert run_name("relu", 2, None, False, 1, "none", 1, f"data.path={deep},{long}").startswith(
        "relu-w2-nobias-my_novels_2024-o")
    # a name that was short enough is spelled out as before, data.path included
    assert run_name("gelu", None, 4, False, 1, "none", 0, "data.path=/c/my.txt,data=text_files") == \
        "gelu-b4-nobias-data.path=_c_my.txt-data=text_files-s0"


def test_settings_that_do_not_change_a_run_are_left_out_of_its_name():
    cfg = compose(["ffn=relu", "optim.lr=0.01", "logger=csv", "data.cache_dir=/tmp/x", "trainer.progress_bar=false",
                   "slurm.partition=gpu", "slurm.timeout_min=30"], return_hydra_config=True)  # the cluster: no name
    assert str(cfg.hydra.sweep.subdir) == "relu-b4-nobias-optim.lr=0.01-s0"
    compiled = compose(["trainer.compile=true"], return_hydra_config=True)  # asked for by name: its own run
    assert str(compiled.hydra.sweep.subdir) == "gelu-b4-nobias-trainer.compile=true-s0"
    graphs = compose(["trainer.compile=true", "trainer.compile_mode=reduce-overhead"], return_hydra_config=True)
    assert str(graphs.hydra.sweep.subdir) == \
        "gelu-b4-nobias-trainer.compile=true-trainer.compile_mode=reduce-overhead-s0"


def test_composition_errors_are_one_line():
    with pytest.raises(ConfigError) as info:
        compose(["ffn=nope"])
    assert "Could not find 'ffn/nope'" in str(info.value) and "\n" not in str(info.value)
    assert "swiglu" in str(info.value)  # the available options are listed


def test_command_lines_are_composed_before_hydra_starts():
    check_overrides(["ffn=relu", "optim.lr=0.01"])
    check_overrides(["-m", "ffn=relu,gelu", "seed=range(0,3)"])
    check_overrides(["--cfg", "job", "ffn=nope"])  # Hydra's own flags: Hydra answers
    for args in (["ffn=nope"], ["-m", "ffn=relu,nope"], ["--multirun", "seed=0,1", "ffn=nope"]):
        with pytest.raises(ConfigError, match="Could not find 'ffn/nope'") as info:
            check_overrides(args)
        assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="Could not override 'optim.nope'"):
        check_overrides(["optim.nope=1"])
    with pytest.raises(ConfigError, match="seed=0,1"):  # a sweep without -m
        check_overrides(["seed=0,1"])


def test_compose_many_with_a_cache_composes_each_override_list_once_and_hands_out_copies(monkeypatch):
    import hydra

    calls = []
    real = hydra.compose
    monkeypatch.setattr(hydra, "compose", lambda **kw: calls.append(kw["overrides"]) or real(**kw))
    cache: dict = {}
    first = compose_many([["ffn=relu"], ["ffn=gelu"], ["ffn=relu"]], cache=cache)
    again = compose_many([["ffn=gelu"], ["seed=3"]], cache=cache)
    assert calls == [["ffn=relu"], ["ffn=gelu"], []]  # seed=3 sets a value: the default groups, composed once
    assert [c.ffn.act for c in first] == ["relu", "gelu", "relu"] and again[1].seed == 3
    first[0].seed = 99  # a copy: what the cache holds is untouched
    assert compose_many([["ffn=relu"]], cache=cache)[0].seed != 99 and len(calls) == 3
    compose_many([["seed=4"], ["ffn=gelu", "seed=5"]], cache=cache)  # new value overrides of the same groups
    assert len(calls) == 3


def _by_hydra(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from ffnbench.config.compose import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return hydra_compose(config_name="train", overrides=overrides, return_hydra_config=True)


def _same(a, b) -> None:
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(a, resolve=False) == OmegaConf.to_container(b, resolve=False)
    assert str(a.hydra.sweep.subdir) == str(b.hydra.sweep.subdir)  # resolved: the run's directory name
    assert OmegaConf.is_struct(a) == OmegaConf.is_struct(b) and OmegaConf.is_readonly(a) == OmegaConf.is_readonly(b)


def test_compose_many_gives_what_hydra_composes_for_each_job_of_a_sweep():
    from fixtures.sweep.runs import preset_jobs

    jobs = []
    for name, every in (("quick", 2), ("cpu_robust", 50), ("lr", 5), ("cpu_robust_more", 40)):
        jobs += preset_jobs(name)[::every]
    jobs += [  # launchers, additions, deletions, dict values, keys Hydra reads after the values, the hydra node
        ["experiment=quick", "seed=3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
        ["ffn=relu", "+foo=1", "~optim.weight_decay", "hydra.sweep.dir=/tmp/elsewhere"],
        ["model=micro", "optim={lr: 0.01, weight_decay: 0.0}", "ffn.act=gelu"],
        ["hydra.job.config.override_dirname.kv_sep=:", "optim.lr=0.02"],
        ["hydra.job.env_copy=[HOME]", "seed=1"], ["hydra={job: {env_copy: [HOME]}}"],
        ["ffn=relu", "hydra.overrides.task=[a]"],
        ["data=shakespeare", "trainer.max_steps=4", "ffn=swiglu", "seed=2"],
    ]
    assert len(jobs) > 30
    for job, fast in zip(jobs, compose_many(jobs, return_hydra_config=True)):
        _same(fast, _by_hydra(job))


def test_a_job_hydra_refuses_gets_hydras_error():
    for job in (["seed=0", "optim.nope=1"], ["ffn=relu", "+optim.lr=1"], ["~optim.nope"]):
        with pytest.raises(ConfigError) as fast:
            compose_many([["ffn=gelu"], job])
        from hydra.errors import HydraException
        with pytest.raises(HydraException) as slow:
            _by_hydra(job)
        assert " ".join(str(slow.value).split()) in str(fast.value)
