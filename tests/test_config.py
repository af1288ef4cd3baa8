"""Config → objects: the FFN sizing default, run names, identity diffs, one-line composition errors."""

import pytest

from ffnbench.config import (
    MAX_NAME_EXTRAS,
    compose,
    ffn_spec,
    identity_diff,
    model_config,
    run_name,
)
from ffnbench.errors import ConfigError


def test_neither_width_nor_budget_means_budget_4():
    spec = ffn_spec({"act": "swiglu", "width": None, "budget": None})
    assert (spec.sizing, spec.ratio) == ("budget", 4.0)


def test_ratios_from_the_command_line_may_be_fractions():
    assert ffn_spec({"act": "gelu", "budget": "8/3"}).ratio == pytest.approx(8 / 3)
    with pytest.raises(ConfigError, match="ffn.width: expected a number"):
        ffn_spec({"act": "gelu", "width": "wide"})


def test_no_variant_chosen_is_an_error():
    with pytest.raises(ConfigError, match="ffn.act: no FFN variant chosen"):
        ffn_spec({"act": "???", "width": 4})


def test_run_names_say_the_ffn_and_seed_and_stay_short():
    assert run_name("swiglu", None, 4, False, 1, "none", 0, "") == "swiglu-b4-nobias-s0"
    assert run_name("gelu", 8, None, True, 64, "tanh", 2, "optim.lr=0.01") == "gelu-w8-bias-m64-tanh-optim.lr=0.01-s2"
    long = ",".join(f"key{i}=value{i}" for i in range(20))
    name = run_name("relu", 2, None, False, 1, "none", 1, long)
    assert len(name) < 40 and name.startswith("relu-w2-nobias-o") and name.endswith("-s1")
    assert name == run_name("relu", 2, None, False, 1, "none", 1, long)  # stable: a rerun finds it
    assert len(long) > MAX_NAME_EXTRAS


def test_settings_that_do_not_change_a_run_are_left_out_of_its_name():
    cfg = compose(["ffn=relu", "optim.lr=0.01", "logger=csv", "data.cache_dir=/tmp/x", "trainer.progress_bar=false"],
                  return_hydra_config=True)
    assert str(cfg.hydra.sweep.subdir) == "relu-b4-nobias-optim.lr=0.01-s0"
    compiled = compose(["trainer.compile=true"], return_hydra_config=True)  # asked for by name: its own run
    assert str(compiled.hydra.sweep.subdir) == "gelu-b4-nobias-trainer.compile=true-s0"


def test_identity_diff_ignores_where_and_how_a_run_is_watched():
    a = {"optim": {"lr": 0.003}, "logger": {"csv": True}, "run_dir": "/a", "trainer": {"compile": False}}
    b = {"optim": {"lr": 0.003}, "logger": {"csv": False}, "run_dir": "/b", "trainer": {"compile": True}}
    assert identity_diff(a, b) == {}
    b["optim"]["lr"] = 0.01
    assert identity_diff(a, b) == {"optim.lr": (0.003, 0.01)}


def test_composition_errors_are_one_line():
    with pytest.raises(ConfigError) as info:
        compose(["ffn=nope"])
    assert "Could not find 'ffn/nope'" in str(info.value) and "\n" not in str(info.value)
    assert "swiglu" in str(info.value)  # the available options are listed


def test_model_config_solves_d_model_for_a_fixed_budget():
    cfg = compose(["model=tiny", "ffn=gelu", "ffn.width=8", "model.non_embedding_params=500000"])
    mcfg = model_config(cfg, 256)
    assert mcfg.d_model != 128 and mcfg.d_model % mcfg.n_head == 0
