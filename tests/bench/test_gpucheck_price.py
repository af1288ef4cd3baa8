"""ffnbench.bench.gpucheck_price: the price block of gpucheck.json, the contract ffnbench.sweep.cost reads."""

import math

import pytest

from ffnbench.bench import gpucheck_price as gp


def row(group="small", status="finished", problems=(), mfu=0.2, **clock) -> dict:
    """A training check's row (gpucheck_train.train_check) with the figures the price reads."""
    return {"group": group, "status": status, "problems": list(problems), "mfu": mfu, "peak_flops": 989e12,
            "tokens_per_s": 1e6, "tokens_per_step": 16384,
            "clock": {"start_to_first_step_s": 40.0, "val_tokens_per_s": 4e6, "checkpoint_s": 0.5,
                      "checkpoint_bytes": 167_000_000,
                      "val_passes": [{"step": 0, "in_fit": False, "seconds": 20.0, "tokens": 16384}], **clock},
            "compilations": {"seconds": 30.0, "seconds_after_first_step": 2.0}}


RUN = {"steps": 3246, "tokens_per_step": 16384, "val_tokens": 262144, "final_val_tokens": 1048576,
       "validations_in_fit": 12, "checkpoints": 7}


def test_a_runs_overhead_is_its_parts_at_the_measured_rates():
    parts = gp.run_overhead(row(), process_s=5.0, run=RUN)
    setup = 40.0 - 16384 / 4e6 - 16384 / 1e6  # its own step-0 validation and its first step taken out
    val_pass = 262144 / 4e6
    final = (262144 + 1048576) / 4e6
    assert parts["setup_s"] == pytest.approx(setup) and parts["val_pass_s"] == pytest.approx(val_pass)
    assert parts["val_passes"] == 13 and parts["final_val_s"] == pytest.approx(final)
    assert parts["total_s"] == pytest.approx(5.0 + setup + 13 * val_pass + final + 7 * 0.5 + 2.0)
    assert parts["compile_s"] == 30.0 and parts["checkpoint_bytes"] == 167_000_000
    assert gp.run_overhead(row(checkpoint_s=None), 5.0, RUN) is None  # a figure missing: no overhead


def test_the_price_block_has_the_contracts_shape():
    rows = [row("small", mfu=0.21), row(None, mfu=0.5),  # a shape that prices no group
            row("base", problems=["2 graph(s) compiled after warm-up"], mfu=0.35),
            row("small", mfu=0.9)]  # a second row of a group: the first prices it
    block = gp.price_block("NVIDIA H100 80GB HBM3", rows, process_s=5.0, runs={"small": RUN, "base": RUN})
    assert {k: block[k] for k in ("gpu", "mfu", "attention_flops")} == {
        "gpu": "NVIDIA H100 80GB HBM3", "mfu": {"small": 0.21, "base": 0.35}, "attention_flops": "causal"}
    assert set(block["overhead_s_per_run"]) == {"small", "base"}
    assert block["overhead_s_per_run"]["small"] == block["overhead_parts"]["small"]["total_s"]
    assert block["problems"] == {"base": ["2 graph(s) compiled after warm-up"]}  # priced, and said so
    unfinished = gp.price_block(None, [row("small", status="failed")], 5.0, {"small": RUN})
    assert unfinished["mfu"] == {} and unfinished["overhead_s_per_run"] == {}
    no_process = gp.price_block(None, [row("small")], None, {"small": RUN})  # the process check was skipped
    assert no_process["mfu"] == {"small": 0.2} and no_process["overhead_s_per_run"] == {}


def test_a_sweep_run_is_counted_from_its_composed_config():
    """The activations experiment's small run (conf/experiment/_gpu.yaml): 5 tokens per non-embedding parameter of
    the 4·d FFN reference at 64 × 256 tokens a step, validation every 250 steps, a checkpoint every 500."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import reference_params

    run = gp.sweep_run("activations", ["model=small", "ffn=gelu", "ffn.budget=4"])
    steps = math.ceil(5 * reference_params(compose(["experiment=activations", "model=small"])) / (64 * 256))
    assert run["steps"] == steps and run["tokens_per_step"] == 64 * 256
    assert (run["val_tokens"], run["final_val_tokens"]) == (262144, 1048576)
    assert (run["validations_in_fit"], run["checkpoints"]) == (steps // 250, steps // 500 + (steps % 500 > 0))


def test_validation_counts():
    assert gp.validation_counts(40, 20, 20) == (2, 2)  # the end is a checkpoint step already
    assert gp.validation_counts(45, 20, 20) == (2, 3)  # and one more at the end
    assert gp.validation_counts(10, 100, 100) == (0, 1)
