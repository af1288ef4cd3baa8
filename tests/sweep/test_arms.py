"""The robust protocol at GPU scale (ffnbench.sweep.arms, ffnbench.sweep.cost): every claim experiment crosses its
comparisons with the arms its verdicts need, the dry-run prices them before a GPU-minute is spent, and a budget
cuts arms from the end, naming what they leave unchecked."""

import json

import pytest

from ffnbench.claims.lr_protocol import ROBUST_MIN_LRS, ROBUST_MIN_SEEDS, lr_protocol
from ffnbench.config.compose import compose
from ffnbench.errors import ConfigError
from ffnbench.model.accounting import count_flops
from ffnbench.sweep import cli, cost
from ffnbench.sweep.arms import arm_grids, arms_of, lr_grid
from ffnbench.sweep.cost import ArmCost, arm_costs, price, within_budget
from ffnbench.sweep.planning import experiments, plan, preset_grids, run_count

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


def _cost(name, priority, hours):
    from ffnbench.sweep.arms import Arm

    return ArmCost(Arm(name, priority, {}, None if priority == 1 else name), seconds=hours * 3600)


def test_a_budget_keeps_the_arms_in_priority_order_that_fit_and_cuts_the_rest():
    costs = [_cost("base", 1, 1.0), _cost("init", 2, 1.0), _cost("length", 3, 2.0), _cost("size", 4, 0.03)]
    kept, cut = within_budget(costs, gpu_hours=2.5)
    assert [c.name for c in kept] == ["base", "init"] and [c.name for c in cut] == ["length", "size"]  # size never
    # jumps the queue although it would fit
    kept, cut = within_budget(costs, gpu_hours=100)
    assert len(kept) == 4 and not cut
    assert within_budget(costs, gpu_hours=2.5, gpus=4)[1] == []  # 4 GPUs: the same hours spread over four


def _line(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


def test_the_dry_run_prices_the_arms_says_its_figures_are_assumed_and_a_budget_cuts_from_the_end(
        capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cost, "BENCH_DIR", tmp_path / "bench")  # no gpu-check record: every figure a default
    cli.main(["linear", "--dry-run", "--gpu", "H100"])
    out = capsys.readouterr().out
    assert "MFU: small 0.2 assumed" in out and "overhead per run: small 60 s assumed" in out
    assert "attention FLOPs counted causal" in out and "stated defaults" in out
    for arm in ("gpt2_1x", "fan_in_1x, checks init", "tokens_4x, checks length"):
        assert f"arm {arm}:" in out
    assert "checked on: lr, init, length — for C13" in out
    full_line = _line(out, "linear: ")
    cfg = compose(["experiment=linear"], return_hydra_config=True)
    runs, sweep_cfg = plan("linear", None, [])
    costs = arm_costs(runs, preset_grids(sweep_cfg), price("H100", tmp_path / "bench"), 3)
    budget = (costs[0].hours() + costs[0].bracketing_hours()) * 1.2  # the first arm fits, the second does not
    assert cfg.lr_protocol.bracket_cap == 3
    cli.main(["linear", "--dry-run", "--gpu", "H100", "--gpu-hours", f"{budget:.3f}"])
    cut = capsys.readouterr().out
    assert "cut for the budget" in cut and "fan_in_1x, tokens_4x" in cut and "left unchecked: init, length" in cut
    planned = _line(cut, "linear: ")
    assert int(planned.split()[1]) * 3 == int(full_line.split()[1])  # one arm of three is planned
    assert int(planned.split()[1]) == int(_line(cut, "  total: ").split()[1])  # and priced: the kept arm
    with pytest.raises(SystemExit) as e:
        cli.main(["linear", "--dry-run", "--gpu-hours", "0.0001"])
    assert e.value.code == 2 and "not even the first arm" in capsys.readouterr().err


def test_the_dry_runs_header_and_its_cost_block_count_the_same_runs_one_line_each(capsys, tmp_path, monkeypatch):
    """linear's 3 comparison configs × 3 arms, each 7 lrs × 3 tuning seeds and 6 judged seeds judged at the chosen lr
    and its two neighbours: 3 × 3 × (21 + 18) runs, counted alike by the header (which counted each waiting judged job
    once) and the cost block; and each planned run printed on one line, however long."""
    monkeypatch.chdir(tmp_path)
    cli.main(["linear", "--dry-run", "--gpu", "H100"])
    out = capsys.readouterr().out
    expected = 3 * 3 * (7 * 3 + 6 * 3)
    assert int(_line(out, "linear: ").split()[1]) == expected == int(_line(out, "  total: ").split()[1])
    assert "162 after the lr-tuning stage" in _line(out, "linear: ")  # 54 judged jobs, each at 3 lrs
    runs, _ = plan("linear", None, [])
    assert run_count(runs) == expected and len(runs) == 3 * 3 * (21 + 6)
    lines = out.splitlines()
    for r in runs:
        assert any(line.startswith(f"  {r.action:<8} {r.run_dir}  {' '.join(r.overrides)}") for line in lines), r


H100_RECORD = {  # what `make gpu-check` writes (its price block: ffnbench.bench.gpucheck), trimmed
    "machine": {"label": "nvidia-h100-80gb-hbm3", "accelerator": "gpu", "gpu": "NVIDIA H100 80GB HBM3"},
    "date": "2026-12-06T10:00:00+0000",
    "price": {"gpu": "NVIDIA H100 80GB HBM3", "mfu": {"small": 0.25}, "overhead_s_per_run": {"small": 40.0},
              "attention_flops": "causal", "peak_flops": {"small": 989e12}},
}


def test_a_gpu_check_record_prices_the_dry_run_from_its_mfu_and_overhead_and_says_so(capsys, tmp_path, monkeypatch):
    """Issue 42, defect 3: a record for the H100 in the bench folder (the name under price.gpu, as gpu-check writes
    it, not a top-level `gpu`) prices each run at its measured MFU and fixed overhead, attention counted causal; the
    dry run says which figures are measured and which assumed."""
    bench = tmp_path / "bench"
    (bench / "nvidia-h100-80gb-hbm3").mkdir(parents=True)
    (bench / "nvidia-h100-80gb-hbm3" / "gpucheck.json").write_text(json.dumps(H100_RECORD))
    monkeypatch.setattr(cost, "BENCH_DIR", bench)
    monkeypatch.chdir(tmp_path)
    cli.main(["linear", "--dry-run", "--gpu", "H100"])
    out = capsys.readouterr().out
    assert "MFU: small 0.25 measured" in out and "overhead per run: small 40 s measured" in out
    assert "measured by `make gpu-check`" in out and str(bench / "nvidia-h100-80gb-hbm3" / "gpucheck.json") in out
    assert "assumed" not in _line(out, "    MFU:") and "stated defaults" not in out
    runs, _ = plan("linear", None, [])
    seconds = sum((1 + (r.neighbours if r.action == "wait" else 0))
                  * (count_flops(r.work.model, causal=True).training * r.work.tokens / (0.25 * 989e12) + 40.0)
                  for r in runs)
    assert f"{seconds / 3600:.1f} GPU-h (+ up to" in _line(out, "  total: ")
    # a base-sized run has no measured figure: its MFU and overhead are the stated defaults, and said so
    rate = price("H100", bench)
    assert rate.mfu_of("base") == cost.Figure(0.30, False) and rate.overhead_of("small") == cost.Figure(40.0, True)
    assert "base 0.3 assumed" in "\n".join(rate.describe(["base", "small"]))


def test_a_record_counting_full_attention_prices_full_attention_and_other_gpus_are_not_priced_by_it(tmp_path):
    bench = tmp_path / "bench"
    (bench / "h100").mkdir(parents=True)
    record = {**H100_RECORD, "price": {**H100_RECORD["price"], "attention_flops": "full"}}
    (bench / "h100" / "gpucheck.json").write_text(json.dumps(record))
    runs, _ = plan("linear", None, [])
    work = runs[0].work
    assert price("H100", bench).flops(work) == count_flops(work.model).training * work.tokens
    assert price("H100", tmp_path / "none").flops(work) == count_flops(work.model, causal=True).training * work.tokens
    assert price("A100", bench).record is None  # another GPU: its own defaults
    assert price("H100 PCIe", bench).record is None  # another H100: not priced by the SXM's record
    (bench / "h100" / "gpucheck.json").write_text(json.dumps({**H100_RECORD, "price": None}))  # a crash before it
    assert "no `price` block" in price("H100", bench).note and price("H100", bench).mfu_of("small").measured is False
    with pytest.raises(ValueError, match="not in ffnbench/training/throughput.py"):
        price("Voodoo 3", bench)
