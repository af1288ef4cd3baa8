"""The robustness rules of a deciding comparison (ffnbench.claims.robust), each outcome against a known answer on
C4 (loss(gelu) − loss(swiglu), supported when GELU is better): lr-robust or lr-dependent, init-robust or
init-dependent, length-robust or early-training (shrunk, or a sign change), optimum not bracketed; and the checks
that could not be made are named."""

from fixtures.report.synthetic import GRID, make_record
from fixtures.report.synthetic import tuned_arm as arm

from ffnbench.claims import Run, evaluate
from ffnbench.stats.verdicts import INCONCLUSIVE, SUPPORTED

# SwiGLU better than GELU at every lr, each best at 0.004: a robust ranking
RELU = (3.40, 3.20, 3.10, 3.15, 3.30)
GELU = (3.25, 3.05, 2.95, 3.00, 3.20)


def c3(records):
    result = {r.claim.id: r for r in evaluate([Run.from_record(r) for r in records], bench_files=[])}["C3"]
    return result, "\n".join(result.details)


def test_a_ranking_that_holds_at_both_chosen_lrs_is_lr_robust_and_decides():
    result, details = c3(arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95))
    assert result.verdict.verdict == SUPPORTED, result.verdict
    assert "[lr-robust]" in result.effect
    assert "lr-robust: best-vs-best +0.150; at the chosen lrs +0.150 at 0.004" in details
    assert "not checked: init (no runs under the other model.init), training length" in details


def test_a_gap_that_comes_from_the_lrs_each_side_got_is_lr_dependent_and_inconclusive():
    # gelu is best at 0.008 and swiglu at 0.002; at gelu's lr swiglu is far worse: the best-vs-best gap (+0.05,
    # SwiGLU better) reverses at a shared lr of 0.008 (−0.40)
    result, details = c3(arm("gelu", (3.50, 3.30, 3.10, 3.00, 3.20), 3.00)
                         + arm("swiglu", (3.10, 2.95, 3.20, 3.40, 3.60), 2.95))
    assert result.verdict.verdict == INCONCLUSIVE
    assert "inconclusive (lr-dependent)" in result.verdict.reason and "would be supported" in result.verdict.reason
    assert "[lr-dependent]" in result.effect
    assert "they fall on the other side of the rule's threshold: the gap depends on which lr each side got" in details
    assert "shared-lr differences on the tuning seeds (gelu − swiglu): 0.001: +0.400; 0.002: +0.350" in details


def test_an_optimum_at_the_edge_of_its_grid_is_named_not_bracketed():
    result, details = c3(arm("gelu", (3.60, 3.50, 3.40, 3.30, 3.25), 3.25) + arm("swiglu", GELU, 2.95))
    assert "optimum not bracketed" in result.effect
    assert "gelu: optimum not bracketed (at the upper edge of 5 lrs)" in details
    assert result.verdict.verdict == SUPPORTED  # the label does not change the verdict


def test_the_other_init_agreeing_keeps_the_verdict_and_disagreeing_makes_it_init_dependent():
    gpt2 = arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95)
    fan_in = {"model.init": "fan_in"}
    agree = arm("gelu", RELU, 3.05, fan_in) + arm("swiglu", GELU, 2.95, fan_in)
    result, details = c3(gpt2 + agree)
    assert result.verdict.verdict == SUPPORTED and "init-robust" in result.effect
    assert "init-robust: loss(gelu) − loss(swiglu) under model.init=fan_in" in details
    # under fan_in gelu is better at every lr: the inits disagree
    flipped = arm("gelu", GELU, 2.95, fan_in) + arm("swiglu", RELU, 3.10, fan_in)
    result, details = c3(gpt2 + flipped)
    assert result.verdict.verdict == INCONCLUSIVE and "inconclusive (init-dependent)" in result.verdict.reason
    assert "init-dependent" in result.effect
    # a tie under the other init (no decided verdict there) is init-dependent too
    tied = arm("gelu", GELU, 2.95, fan_in) + arm("swiglu", GELU, 2.95, fan_in)
    assert c3(gpt2 + tied)[0].verdict.verdict == INCONCLUSIVE
    # two inits that both leave it undecided agree: init-robust, and still inconclusive
    both_tied = c3(arm("gelu", GELU, 2.95) + arm("swiglu", GELU, 2.95) + tied)[0]
    assert both_tied.verdict.verdict == INCONCLUSIVE and "init-robust" in both_tied.effect


def test_an_effect_that_shrinks_by_half_at_four_times_the_tokens_is_early_training_and_a_sign_change_undecides():
    short = {"trainer.tokens_per_param": 6}
    long = {"trainer.tokens_per_param": 24}
    base = arm("gelu", RELU, 3.10, short) + arm("swiglu", GELU, 2.95, short)
    shrunk = arm("gelu", RELU, 3.00, long) + arm("swiglu", GELU, 2.95, long)  # +0.15 → +0.05
    result, details = c3(base + shrunk)
    assert result.verdict.verdict == SUPPORTED and "early-training" in result.effect
    assert "the effect shrinks by more than half" in details
    held = arm("gelu", RELU, 3.05, long) + arm("swiglu", GELU, 2.95, long)  # +0.15 → +0.10
    assert "length-robust" in c3(base + held)[0].effect
    flipped = arm("gelu", GELU, 2.90, long) + arm("swiglu", RELU, 2.95, long)  # gelu better at 4×
    result, _ = c3(base + flipped)
    assert result.verdict.verdict == INCONCLUSIVE and "inconclusive (early-training)" in result.verdict.reason


def test_c7s_lr_check_asks_which_side_of_the_margin_a_cost_falls_on_not_its_sign():
    """Dropping the bias costs +0.002 nats at the tuned lrs and −0.003 at a shared lr: both far below the 0.015 bpb
    margin, so the verdict (biases can go) is lr-robust although the two signs differ."""
    from ffnbench.claims import evaluate

    def c7_arm(bias: bool, tuning: tuple[float, ...], judged: float) -> list[dict]:
        return [make_record("gelu", s, loss + 0.001 * (s - 7), lr=lr, bias=bias, config={"tuning": True})
                for s in (7, 8, 9) for lr, loss in zip(GRID, tuning)] + [
            make_record("gelu", s, judged + (0.0, 0.0004, 0.0002)[s] * (1 if bias else 2), lr=4e-3, bias=bias)
            for s in (0, 1, 2)]

    records = (c7_arm(True, (3.30, 3.10, 3.000, 3.05, 3.20), 3.000)
               + c7_arm(False, (3.30, 3.10, 2.997, 3.05, 3.20), 3.002))
    result = {r.claim.id: r for r in evaluate([Run.from_record(r) for r in records], bench_files=[])}["C7"]
    assert "lr-robust" in result.effect, result.effect
    assert result.verdict.verdict == SUPPORTED, result.verdict

