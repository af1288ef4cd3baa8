"""What makes two runs the same run: the keys identity_diff ignores, the resolved device and precision, and
identity_key's agreement with identity_diff."""

from ffnbench.config.compose import compose
from ffnbench.config.identity import identity_diff, identity_key, with_hardware
from ffnbench.runs.migrate import migrate_config


def test_identity_diff_ignores_where_and_how_a_run_is_watched():
    a = {"optim": {"lr": 0.003}, "logger": {"csv": True}, "run_dir": "/a", "trainer": {"compile": False}}
    b = {"optim": {"lr": 0.003}, "logger": {"csv": False}, "run_dir": "/b", "trainer": {"compile": True}}
    assert identity_diff(a, b) == {}
    b["optim"]["lr"] = 0.01
    assert identity_diff(a, b) == {"optim.lr": (0.003, 0.01)}


def test_the_resolved_device_and_precision_are_part_of_a_runs_identity():
    """What a run resolves `auto` to is stored in its config (run_config.json, the checkpoint's fingerprint,
    result.json) and decides identity: a CPU fp32 run and a GPU bf16 run of the same settings are not the same
    run."""
    cpu = with_hardware({"trainer": {"accelerator": "auto", "precision": "auto"}}, "cpu", "32-true")
    gpu = with_hardware({"trainer": {"accelerator": "auto", "precision": "auto"}}, "gpu", "bf16-mixed")
    assert cpu["trainer"] == {"accelerator": "cpu", "precision": "32-true"}
    assert identity_diff(cpu, gpu) == {"trainer.accelerator": ("cpu", "gpu"),
                                       "trainer.precision": ("32-true", "bf16-mixed")}
    assert identity_diff(cpu, with_hardware(cpu, "cpu", "bf16-mixed")) == {
        "trainer.precision": ("32-true", "bf16-mixed")}
    assert identity_diff({"trainer": {"deterministic": True}}, {"trainer": {"deterministic": False}}) == {
        "trainer.deterministic": (True, False)}
    # the device is still left out of run directory names: a GPU rerun of a CPU sweep meets its directories
    # and is refused there, naming the difference
    named = compose(["trainer.accelerator=cpu"], return_hydra_config=True)
    assert str(named.hydra.sweep.subdir) == "gelu-b4-nobias-s0"


def test_identity_key_is_equal_exactly_when_identity_diff_finds_nothing():
    """tuning.tuning_group matches configs by identity_key instead of comparing every pair with identity_diff; the
    two must agree on every case identity_diff handles: ignored keys, missing keys, 1 = 1.0, nested lists, and
    configs as stored and as migrated."""
    cpu = with_hardware({"trainer": {"accelerator": "auto", "precision": "auto"}}, "cpu", "32-true")
    gpu = with_hardware({"trainer": {"accelerator": "auto", "precision": "auto"}}, "gpu", "bf16-mixed")
    base = compose(["ffn=swiglu"])
    from omegaconf import OmegaConf

    full = OmegaConf.to_container(base, resolve=True)
    configs = [
        cpu, gpu, {"trainer": {"accelerator": "auto", "precision": "auto"}}, {"trainer": {}},
        {"trainer": {"precision": 32}}, {"trainer": {"deterministic": False}}, {"trainer": {"deterministic": True}},
        {"optim": {"lr": 0.001}}, {"optim": {"lr": 0.002}}, {"optim": {"lr": 1}}, {"optim": {"lr": 1.0}},
        {"seed": 0, "logger": {"name": "csv"}}, {"seed": 0, "logger": {"name": "wandb"}}, {"seed": 1},
        {"ffn": {"width": [1, 2]}}, {"ffn": {"width": [1, 3]}}, {"ffn": {"width": (1, 2)}}, {"ffn": {"width": [[1]]}},
        {"ffn": {"width": None}}, {"ffn": {}}, {"ffn": {"width": 4}}, full,
        {**full, "seed": full["seed"] + 1},
    ]
    configs += [migrate_config(c) for c in configs]
    for ignore in ((), ("seed",), ("optim.lr", "seed")):
        for a in configs:
            for b in configs:
                same = not identity_diff(a, b, ignore=("logger", *ignore))
                assert (identity_key(a, ignore=("logger", *ignore)) == identity_key(b, ignore=("logger", *ignore))) \
                    == same, (a, b, ignore)
    assert identity_key(base) == identity_key(full)  # a composed config keys as its plain container
