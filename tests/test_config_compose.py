"""Hydra composition: run names and what they leave out, one-line composition errors, command lines checked before
Hydra starts, composing many override lists at once."""

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


def test_settings_that_do_not_change_a_run_are_left_out_of_its_name():
    cfg = compose(["ffn=relu", "optim.lr=0.01", "logger=csv", "data.cache_dir=/tmp/x", "trainer.progress_bar=false"],
                  return_hydra_config=True)
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
    assert calls == [["ffn=relu"], ["ffn=gelu"], ["seed=3"]]
    assert [c.ffn.act for c in first] == ["relu", "gelu", "relu"] and again[1].seed == 3
    first[0].seed = 99  # a copy: what the cache holds is untouched
    assert compose_many([["ffn=relu"]], cache=cache)[0].seed != 99 and len(calls) == 3
