"""Config → typed specs: the FFN sizing default, model configs and the fixed-budget arm, optimizer and trainer
settings, each bad value one ConfigError naming its field."""

import math

import pytest

from ffnbench.config.compose import compose
from ffnbench.config.identity import identity_diff
from ffnbench.config.schema import (
    OptimConfig,
    TrainerConfig,
    ffn_spec,
    model_config,
    optim_config,
    run_seed,
    trainer_config,
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


def test_model_config_solves_d_model_for_a_fixed_budget():
    cfg = compose(["model=tiny", "ffn=gelu", "ffn.width=8", "model.non_embedding_params=1000000"])
    mcfg = model_config(cfg, 256)
    assert mcfg.d_model != 128 and mcfg.d_model % mcfg.n_head == 0


def test_the_default_optim_and_trainer_configs_are_typed():
    cfg = compose([])
    assert optim_config(cfg.optim) == OptimConfig(lr=0.003, min_lr_ratio=0.1, warmup_steps=50, weight_decay=0.1,
                                                  betas=(0.9, 0.95), eps=1e-8, grad_clip=1.0)
    t = trainer_config(compose(["trainer=ddp"]).trainer)
    assert (t.strategy, t.devices, t.max_tokens, t.max_steps, t.val_every) == ("ddp", 2, 1_000_000, None, 100)
    assert isinstance(optim_config({**cfg.optim, "lr": 1}).lr, float)  # an lr of 1 is 1.0
    assert trainer_config({**cfg.trainer, "precision": 32}).precision == "32"  # precision=32 on the command line


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lr=-1", "optim.lr: must be > 0, got -1"),
        ("optim.lr=0", "optim.lr: must be > 0, got 0"),
        ("optim.lr=fast", "optim.lr: expected a number, got 'fast'"),
        ("optim.betas=[0.9,1.5]", "optim.betas[1]: must be in [0, 1), got 1.5"),
        ("optim.betas=[1.0,0.9]", "optim.betas[0]: must be in [0, 1), got 1.0"),
        ("optim.betas=[0.9]", "optim.betas: expected two numbers [beta1, beta2], got [0.9]"),
        ("optim.weight_decay=-0.1", "optim.weight_decay: must be ≥ 0, got -0.1"),
        ("optim.warmup_steps=-1", "optim.warmup_steps: must be an integer ≥ 0, got -1"),
        ("optim.min_lr_ratio=1.5", "optim.min_lr_ratio: must be in [0, 1], got 1.5"),
        ("optim.eps=0", "optim.eps: must be > 0, got 0"),
        ("optim.grad_clip=-1", "optim.grad_clip: must be > 0, got -1 (null turns clipping off)"),
        ("+optim.momentum=0.9", "optim.momentum: unknown setting; optim has: lr, min_lr_ratio"),
        ("optim.z_loss=-1e-4", "optim.z_loss: must be ≥ 0, got -0.0001 (PaLM used 1e-4; 0 turns it off)"),
        ("optim.z_loss=lots", "optim.z_loss: expected a number, got 'lots'"),
        ("optim.z_loss=true", "optim.z_loss: expected a number, got True"),
    ],
)
def test_bad_optim_settings_name_the_field(override, message):
    with pytest.raises(ConfigError) as info:
        optim_config(compose([override]).optim)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.max_steps=0", "trainer.max_steps: must be a positive integer, got 0"),
        ("trainer.max_tokens=-5", "trainer.max_tokens: must be > 0, got -5"),
        ("trainer.max_tokens=null", "trainer.max_tokens: no training budget"),
        ("trainer.val_every=0", "trainer.val_every: must be a positive integer, got 0"),
        ("trainer.ckpt_every=-1", "trainer.ckpt_every: must be a positive integer, got -1"),
        ("trainer.log_every=2.5", "trainer.log_every: must be a positive integer, got 2.5"),
        ("trainer.devices=0", "trainer.devices: must be a positive integer, got 0"),
        ("trainer.num_nodes=0", "trainer.num_nodes: must be a positive integer, got 0"),
        ("trainer.precision=fp8", "trainer.precision: unknown precision 'fp8'; known: auto, 64-true"),
        ("trainer.accelerator=tpu", "trainer.accelerator: expected auto, cpu or gpu, got 'tpu'"),
        ("trainer.compile=yes", "trainer.compile: expected true or false, got 'yes'"),
        ("trainer.compile_mode=max", "trainer.compile_mode: expected one of default, reduce-overhead, got 'max'"),
        ("trainer.compile_mode=reduce-overhead", "trainer.compile_mode=reduce-overhead: it says how trainer.compile "
                                                 "compiles, and trainer.compile is false"),
        ("trainer.peak_flops=0", "trainer.peak_flops: must be > 0, got 0"),
        ("trainer.inner_steps=0", "trainer.inner_steps: must be a positive integer, got 0"),
        ("trainer.inner_steps=4", "trainer.inner_steps=4: it must divide trainer.log_every, val_every and ckpt_every "
                                  "(their greatest common divisor is 10); use trainer.inner_steps=null (automatic) or "
                                  "a divisor of 10"),
        ("+trainer.epochs=1", "trainer.epochs: unknown setting"),
    ],
)
def test_bad_trainer_settings_name_the_field(override, message):
    with pytest.raises(ConfigError) as info:
        trainer_config(compose([override]).trainer)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize(("overrides", "steps"), [
    ([], 10),  # the defaults: log_every 10, val_every 100, ckpt_every 100
    (["trainer.val_every=25"], 5),
    (["trainer.log_every=100"], 10),  # gcd 100: its largest divisor up to MAX_INNER_STEPS
    (["trainer.log_every=16", "trainer.val_every=32", "trainer.ckpt_every=64"], 16),
    (["trainer.log_every=17", "trainer.val_every=34", "trainer.ckpt_every=51"], 1),  # gcd 17 > 16, a prime
    (["trainer.log_every=1"], 1),
    (["trainer.inner_steps=5"], 5),
])
def test_a_batch_holds_steps_up_to_the_next_logging_validation_or_checkpoint_step(overrides, steps):
    assert trainer_config(compose(overrides).trainer).steps_per_batch() == steps


def test_the_seed_is_a_non_negative_integer():
    assert run_seed({"seed": 3}) == 3
    for bad in (-1, 1.5, "one", True):
        with pytest.raises(ConfigError, match=f"^seed: must be an integer ≥ 0, got {bad!r}"):
            run_seed({"seed": bad})


def test_the_budget_in_steps():
    assert TrainerConfig(max_tokens=1000).total_steps(256) == 4  # rounded up
    assert TrainerConfig(max_tokens=1000, max_steps=7).total_steps(256) == 7  # steps win
    assert TrainerConfig(max_tokens=1e-9).total_steps(256) == 1


def test_the_fixed_budget_arm_must_come_close_to_its_budget():
    from ffnbench.model.accounting import count_params, solve_d_model

    cfg = compose(["model=tiny", "ffn=gelu", "ffn.width=8", "model.non_embedding_params=1000000"])
    d_model, mismatch = solve_d_model(1e6, 4, 4, ffn_spec(cfg.ffn))  # 112, +0.73%
    assert model_config(cfg, 256).d_model == d_model and 0 < mismatch <= 0.02
    assert mismatch == (count_params(model_config(cfg, 256)).non_embedding - 1e6) / 1e6
    tight = compose(["model=tiny", "ffn=gelu", "ffn.width=8", "model.non_embedding_params=1000000",
                     f"model.max_budget_mismatch={mismatch / 2}"])
    with pytest.raises(ConfigError) as info:
        model_config(tight, 256)
    assert str(info.value).startswith("model.max_budget_mismatch: gelu-w8-nobias with 4 layers of 4 heads gets "
                                      f"d_model={d_model}, +0.73% off") and "\n" not in str(info.value)
    below = compose(["model=tiny", "ffn=gelu", "ffn.width=4", "model.non_embedding_params=500000"])  # d=100: −3.3%
    with pytest.raises(ConfigError, match=r"^model.max_budget_mismatch: .* -3\.32% off"):
        model_config(below, 256)
    with pytest.raises(ConfigError, match=r"^model.max_budget_mismatch: must be ≥ 0"):
        model_config(compose(["model.non_embedding_params=500000", "model.max_budget_mismatch=-1"]), 256)


def test_ffn_max_mismatch_bounds_the_budget_in_both_directions():
    below = compose(["ffn=swiglu", "ffn.budget=4"])  # d = 128: 341 units, −0.098% of the budget
    assert model_config(below, 256).ffn.budget == 4
    with pytest.raises(ConfigError, match=r"-0\.10% off the budget.*ffn.max_mismatch=0.0005"):
        model_config(compose(["ffn=swiglu", "ffn.budget=4", "ffn.max_mismatch=0.0005"]), 256)
    with pytest.raises(ConfigError, match=r"\+0\.20% off the budget.*ffn.max_mismatch=0.0005"):
        model_config(compose(["ffn=swiglu", "ffn.budget=2", "ffn.max_mismatch=0.0005"]), 256)  # 171: above


def test_ffn_init_is_part_of_a_runs_identity_and_name():
    assert model_config(compose([]), 256).ffn_init == "gpt2"
    matched = compose(["ffn=swiglu", "model.ffn_init=matched"], return_hydra_config=True)
    assert model_config(matched, 256).ffn_init == "matched"
    assert str(matched.hydra.sweep.subdir) == "swiglu-b4-nobias-model.ffn_init=matched-s0"
    assert identity_diff({"model": {"ffn_init": "gpt2"}}, {"model": {"ffn_init": "matched"}}) == {
        "model.ffn_init": ("gpt2", "matched")}
    assert identity_diff({"model": {"max_budget_mismatch": 0.02}}, {"model": {"max_budget_mismatch": 0.05}}) == {}
    with pytest.raises(ConfigError, match="^model.ffn_init: expected gpt2 or matched, got 'xavier'"):
        model_config(compose(["model.ffn_init=xavier"]), 256)


def test_a_budget_in_tokens_per_parameter_counts_the_textbook_model_for_every_variant():
    """d=64, 4 layers: attention 4·64²+4·64, a 4·d GELU FFN 2·64·256, two LayerNorms 4·64 per block, a final one."""
    from ffnbench.config.schema import reference_params, trainer_config

    expected = 4 * (4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 4 * 64) + 2 * 64
    for variant in (["ffn=gelu"], ["ffn=swiglu"], ["ffn=relu", "ffn.width=8"], ["ffn=gelu", "ffn.bias=true"]):
        cfg = compose(["model=tiny", "model.d_model=64", "trainer.tokens_per_param=5", *variant])
        assert reference_params(cfg) == expected, variant
        assert trainer_config(cfg.trainer).total_steps(2048, expected) == math.ceil(5 * expected / 2048)
    fixed = compose(["model=tiny", "model.non_embedding_params=2e5", "ffn.width=8"])
    assert reference_params(fixed) == 200_000
    steps = compose(["trainer.tokens_per_param=5", "trainer.max_steps=7"])
    assert trainer_config(steps.trainer).total_steps(2048, expected) == 7  # max_steps wins


def test_a_non_positive_tokens_per_parameter_is_refused():
    from ffnbench.config.schema import trainer_config

    with pytest.raises(ConfigError, match="trainer.tokens_per_param"):
        trainer_config(compose(["trainer.tokens_per_param=0"]).trainer)


def test_deterministic_is_a_checked_trainer_setting():
    assert compose([]).trainer.deterministic is False
    assert trainer_config(compose(["trainer.deterministic=true"]).trainer).deterministic is True
    with pytest.raises(ConfigError, match="^trainer.deterministic: expected true or false, got 'yes'"):
        trainer_config(compose(["trainer.deterministic=yes"]).trainer)


def test_init_qk_norm_and_z_loss_are_read_and_default_to_todays_runs():
    default = compose([])
    mcfg, optim = model_config(default, 256), optim_config(default.optim)
    assert (mcfg.init, mcfg.qk_norm, optim.z_loss) == ("gpt2", False, 0.0)
    for name in ("base", "micro", "mini", "small", "tiny"):  # every model group says them
        assert {"init": "gpt2", "qk_norm": False}.items() <= dict(compose([f"model={name}"]).model).items(), name
    changed = compose(["model.init=fan_in", "model.qk_norm=true", "optim.z_loss=1e-4"], return_hydra_config=True)
    mcfg = model_config(changed, 256)
    assert (mcfg.init, mcfg.qk_norm, optim_config(changed.optim).z_loss) == ("fan_in", True, 1e-4)
    assert str(changed.hydra.sweep.subdir) == \
        "gelu-b4-nobias-model.init=fan_in-model.qk_norm=true-optim.z_loss=1e-4-s0"
    assert model_config({"ffn": {"act": "gelu"}, "model": {"seq_len": 8, "d_model": 16, "n_layer": 1, "n_head": 2}},
                        256).init == "gpt2"  # a model node without them (an older run's config)
    with pytest.raises(ConfigError, match="^model.init: expected gpt2, fan_in or scaled, got 'xavier'$"):
        model_config(compose(["model.init=xavier"]), 256)
    with pytest.raises(ConfigError, match="^model.qk_norm: expected true or false, got 'maybe'$"):
        model_config(compose(["model.qk_norm=maybe"]), 256)
    with pytest.raises(ConfigError, match="^model.qk_norm: heads of d_model/n_head = 128/64 = 2 dimensions"):
        model_config(compose(["model.qk_norm=true", "model.n_head=64"]), 256)


def test_a_fixed_budget_counts_qk_norms():
    """A budget between d_model 64 and 68 (mini: 4 layers of 4 heads), a little nearer 68 without QK-norm; the
    QK-norms' 4·2·2·16 parameters at 64 tip it to 64."""
    from ffnbench.model.accounting import count_params

    def at(d: int, qk_norm: bool) -> int:
        return count_params(model_config(compose(["model=mini", f"model.d_model={d}", f"model.qk_norm={qk_norm}"]),
                                         256)).non_embedding

    assert at(64, True) - at(64, False) == 4 * 2 * 2 * 16
    target = (at(64, False) + at(68, False)) // 2 + 50
    assert abs(at(68, False) - target) < abs(at(64, False) - target)
    assert abs(at(64, True) - target) < abs(at(68, True) - target)
    budget = ["model=mini", f"model.non_embedding_params={target}", "model.max_budget_mismatch=0.5"]
    assert model_config(compose(budget), 256).d_model == 68
    assert model_config(compose([*budget, "model.qk_norm=true"]), 256).d_model == 64


def test_a_run_spec_reads_the_whole_config_once():
    from ffnbench.config.schema import reference_params, run_spec

    cfg = compose(["ffn=swiglu", "seed=3", "trainer.tokens_per_param=5", "optim.lr=0.01"])
    spec = run_spec(cfg, 256)
    assert (spec.model, spec.optim, spec.trainer, spec.seed, spec.reference_params) == (
        model_config(cfg, 256), optim_config(cfg.optim), trainer_config(cfg.trainer), 3, reference_params(cfg))
    assert spec.total_steps(2048) == trainer_config(cfg.trainer).total_steps(2048, reference_params(cfg))
    with pytest.raises(ConfigError, match="^seed: must be an integer ≥ 0"):
        run_spec(compose(["seed=-1"]), 256)
