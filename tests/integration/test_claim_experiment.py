"""A GPU claim experiment end to end on the CPU at micro scale (`make test-slow`): the robust protocol's arms
(tuning, bracketing, judging at the chosen lr and its neighbours) through `python -m ffnbench.sweep`, then a report
whose verdict for the claim is checked on every factor (lr, init, length), none of them "unchecked"."""

import pytest
from fixtures.sweep.runs import micro_args, run_sweep

# the linear experiment (C13), cut to two variants and two seeds a stage; the micro model's lr centre added
MICRO_ARMS = ["hydra.sweeper.compare=[{ffn: 'linear,gelu', ffn.budget: 4}]", "hydra.sweeper.tuning_seeds='100,101'",
              "hydra.sweeper.judged_seeds='0,1'", "++hydra.sweeper.lr_centres.micro=0.004", "lr_protocol.min_seeds=2",
              "lr_protocol.bracket_cap=1"]


@pytest.mark.slow  # ~130 micro runs: minutes on 2 cores
def test_a_claim_experiment_runs_its_arms_and_its_verdict_is_checked_on_every_factor(tmp_path):
    from ffnbench.claims import evaluate
    from ffnbench.report.load import load

    out = run_sweep("linear", "--confirm", "--", *micro_args(tmp_path), *MICRO_ARMS, tmp=tmp_path, timeout=1800)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    loaded = load(tmp_path / "runs" / "linear")
    roles = {r.role for r in loaded.runs}
    assert roles == {"tuning", "judged", "neighbour"}, roles
    inits = {r.factor("model.init") for r in loaded.runs}
    lengths = {r.factor("trainer.tokens_per_param") for r in loaded.runs}
    assert inits == {"gpt2", "fan_in"} and lengths == {5, 20}
    c13 = {r.claim.id: r for r in evaluate(loaded.runs, bench_files=[])}["C13"]
    assert c13.unchecked == (), c13.verdict
    assert "unchecked" not in c13.effect, c13.effect
    assert (tmp_path / "runs" / "linear" / "REPORT.md").exists()
