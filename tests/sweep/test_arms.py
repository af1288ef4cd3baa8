"""The robust protocol at GPU scale (ffnbench.sweep.arms, ffnbench.sweep.cost): every claim experiment crosses its
comparisons with the arms its verdicts need, the dry-run prices them before a GPU-minute is spent, and a budget
cuts arms from the end, naming what they leave unchecked."""

import json

import pytest

from ffnbench.claims.lr_protocol import ROBUST_MIN_LRS, ROBUST_MIN_SEEDS, lr_protocol
from ffnbench.config.compose import compose
from ffnbench.errors import ConfigError
from ffnbench.sweep import cli
from ffnbench.sweep.arms import arm_grids, arms_of, lr_grid
from ffnbench.sweep.cost import ArmCost, Throughput, throughput, within_budget
from ffnbench.sweep.planning import experiments, preset_grids

CLAIM_EXPERIMENTS = [e for e in experiments() if any(arm for _, arm in preset_grids(
    compose([f"experiment={e}"], return_hydra_config=True)))]


def test_every_gpu_claim_experiment_runs_the_robust_protocol():
    assert set(CLAIM_EXPERIMENTS) == {"activations", "widths", "bias", "depth", "sparsity", "linear", "scale", "full"}


@pytest.mark.parametrize("experiment", CLAIM_EXPERIMENTS)
def test_its_arms_check_lr_init_and_length_and_full_checks_size(experiment):
    cfg = compose([f"experiment={experiment}"], return_hydra_config=True)
    grids = preset_grids(cfg)
    protocol = lr_protocol({"lr_protocol": dict(cfg.lr_protocol)})
    assert protocol.robust and protocol.bracket_cap >= 1 and protocol.judge_neighbours
    tuning = [g for g, arm in grids if arm and g.get("tuning")]
    judged = [g for g, arm in grids if arm and g.get("optim.lr") == "tuned"]
    assert tuning and len(tuning) == len(judged)
    for g in tuning:  # lr: ≥ 7 lrs spaced ×√2 on ≥ 3 shared tuning seeds
        assert len(str(g["optim.lr"]).split(",")) >= ROBUST_MIN_LRS
        assert len(str(g["seed"]).split(",")) >= ROBUST_MIN_SEEDS
    inits = {g.get("model.init", cfg.model.init) for g in judged}
    lengths = {g.get("trainer.tokens_per_param", cfg.trainer.tokens_per_param) for g in judged}
    assert inits == {"gpt2", "fan_in"}, inits
    base = cfg.trainer.tokens_per_param
    assert lengths == {base, 4 * base}, lengths  # 1× and 4× the tokens, as the length check reads them
    sizes = {g.get("model", cfg.model.name) for g in judged}
    if experiment == "full":
        assert {"small", "base"} <= sizes
    # every comparison of the preset is in every arm: each arm has the same judged cells but for its own factor
    per_arm = {}
    for g, arm in grids:
        if arm and g.get("optim.lr") == "tuned":
            per_arm.setdefault(arm.name, []).append(g)
    assert len({len(v) for v in per_arm.values()}) == 1


def test_a_grid_has_the_centre_in_the_middle_of_seven_lattice_lrs():
    assert lr_grid(0.002) == [0.000707, 0.001, 0.00141, 0.002, 0.00283, 0.004, 0.00566]


def test_bad_arms_are_one_clear_error():
    with pytest.raises(ConfigError, match="unknown key 'sets'"):
        arms_of({"a": {"priority": 1, "sets": {}}})
    with pytest.raises(ConfigError, match="priority: an integer"):
        arms_of({"a": {"set": {}}})
    node = {"compare": [{"ffn": "relu", "model": "huge"}], "arms": {"a": {"priority": 1, "set": {}}},
            "lr_centres": {"small": 0.002}, "tuning_seeds": "100,101,102", "judged_seeds": "0,1"}
    with pytest.raises(ConfigError, match="no centre for model=huge"):
        arm_grids(node, "small")


def _cost(name, priority, flops):
    from ffnbench.sweep.arms import Arm

    return ArmCost(Arm(name, priority, {}, None if priority == 1 else name), flops=flops)


def test_a_budget_keeps_the_arms_in_priority_order_that_fit_and_cuts_the_rest():
    tp = Throughput("X", 1e15, "test")  # 3.6e18 FLOPs a GPU-hour
    costs = [_cost("base", 1, 3.6e18), _cost("init", 2, 3.6e18), _cost("length", 3, 7.2e18), _cost("size", 4, 1e17)]
    kept, cut = within_budget(costs, tp, gpu_hours=2.5)
    assert [c.name for c in kept] == ["base", "init"] and [c.name for c in cut] == ["length", "size"]  # size never
    # jumps the queue although it would fit
    kept, cut = within_budget(costs, tp, gpu_hours=100)
    assert len(kept) == 4 and not cut
    assert within_budget(costs, tp, gpu_hours=2.5, gpus=4)[1] == []  # 4 GPUs: the same hours spread over four


def test_the_dry_run_prices_the_arms_names_its_throughput_and_a_budget_cuts_from_the_end(capsys, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli.main(["linear", "--dry-run", "--gpu", "H100"])
    out = capsys.readouterr().out
    assert "throughput: a stated default: 40% of the H100's bf16 peak" in out
    for arm in ("gpt2_1x", "fan_in_1x, checks init", "tokens_4x, checks length"):
        assert f"arm {arm}:" in out
    assert "checked on: lr, init, length — for C13" in out
    full_line = next(line for line in out.splitlines() if line.startswith("linear: "))
    from ffnbench.sweep.cost import arm_costs

    cfg = compose(["experiment=linear"], return_hydra_config=True)
    costs = arm_costs("linear", preset_grids(cfg), [], lr_protocol({"lr_protocol": dict(cfg.lr_protocol)}))
    tp = throughput("H100")
    budget = tp.hours(costs[0].flops + costs[0].bracketing_flops) * 1.2  # the first arm fits, the second does not
    cli.main(["linear", "--dry-run", "--gpu", "H100", "--gpu-hours", f"{budget:.3f}"])
    cut = capsys.readouterr().out
    assert "cut for the budget" in cut and "fan_in_1x, tokens_4x" in cut and "left unchecked: init, length" in cut
    planned = next(line for line in cut.splitlines() if line.startswith("linear: "))
    assert int(planned.split()[1]) * 3 == int(full_line.split()[1])  # one arm of three is planned
    with pytest.raises(SystemExit) as e:
        cli.main(["linear", "--dry-run", "--gpu-hours", "0.0001"])
    assert e.value.code == 2 and "not even the first arm" in capsys.readouterr().err


def test_a_gpu_check_result_gives_the_throughput(tmp_path):
    record = {"gpu": "NVIDIA H100 80GB HBM3", "training": [{"model": "small", "mfu": 0.25, "peak_flops": 989e12}]}
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "gpucheck.json").write_text(json.dumps(record))
    tp = throughput("H100", bench_dir=tmp_path)
    assert tp.flops_per_s == pytest.approx(0.25 * 989e12) and "measured by `make gpu-check`" in tp.source
    assert "stated default" in throughput("A100", bench_dir=tmp_path).source  # another GPU: no measurement for it
    with pytest.raises(ValueError, match="not in ffnbench/training/throughput.py"):
        throughput("Voodoo 3", bench_dir=tmp_path)
