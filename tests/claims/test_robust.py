"""The robustness rules of a deciding comparison (ffnbench.claims.robust), each outcome against a known answer on
C3 (loss(gelu) − loss(swiglu), supported when SwiGLU is better): lr-robust or lr-dependent (on the tuning seeds, or
across the judged lrs where neighbour runs exist), init-robust or init-dependent, length-robust or early-training,
optimum not bracketed, plateau-edge, reduced grid; the nested interval that includes the lr choice; and a factor
no run varied, which leaves the claim undecided (its reading where the runs ran kept as `scoped`)."""

from fixtures.report.synthetic import GRID, make_record
from fixtures.report.synthetic import tuned_arm as arm

from ffnbench.claims import Run, evaluate
from ffnbench.claims.lr_protocol import mark_neighbours
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED

# SwiGLU better than GELU at every lr, each best at 0.004: a robust ranking
RELU = (3.40, 3.20, 3.10, 3.15, 3.30)
GELU = (3.25, 3.05, 2.95, 3.00, 3.20)
FAN_IN = {"model.init": "fan_in"}
SHORT, LONG = {"trainer.tokens_per_param": 6}, {"trainer.tokens_per_param": 24}


def c3(records):
    runs = mark_neighbours([Run.from_record(r) for r in records])
    result = {r.claim.id: r for r in evaluate(runs, bench_files=[])}["C3"]
    return result, "\n".join(result.details)


def everywhere(gelu=RELU, gelu_judged=3.10, swiglu=GELU, swiglu_judged=2.95, fan_in=None, long=None):
    """C3's arms in every cell the rules check: 1× under GPT-2's init (the base), 1× under fan_in, 4× the tokens;
    `fan_in`/`long`: (gelu judged, swiglu judged) there, or the base's."""
    out = []
    for config, judged in ((SHORT, (gelu_judged, swiglu_judged)), ({**SHORT, **FAN_IN}, fan_in),
                           (LONG, long)):
        g, w = judged or (gelu_judged, swiglu_judged)
        out += arm("gelu", gelu, g, config) + arm("swiglu", swiglu, w, config)
    return out


def test_a_comparison_checked_on_every_factor_decides_and_one_never_run_elsewhere_does_not():
    result, details = c3(everywhere())
    assert result.verdict.verdict == SUPPORTED, result.verdict
    assert "lr-robust" in result.effect and "init-robust" in result.effect and "length-robust" in result.effect
    # the same comparison with no runs under the other init nor at 4× the tokens: supported where it ran only
    result, details = c3(arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95))
    assert result.scoped.verdict == SUPPORTED
    assert result.verdict.verdict == INCONCLUSIVE, result.verdict
    assert result.verdict.reason.startswith("inconclusive (init, length unchecked)"), result.verdict.reason
    assert "would be supported where it ran" in result.verdict.reason
    assert "init, length unchecked" in result.effect
    assert "not checked: init (no runs under the other model.init), training length" in details
    # an unrun init check never passes, whichever way the comparison points
    result, _ = c3(arm("gelu", GELU, 2.95, SHORT) + arm("swiglu", RELU, 3.10, SHORT) + arm("gelu", GELU, 2.95, LONG)
                   + arm("swiglu", RELU, 3.10, LONG))
    assert result.scoped.verdict == CONTRADICTED and result.verdict.verdict == INCONCLUSIVE
    assert result.verdict.reason.startswith("inconclusive (init unchecked)"), result.verdict.reason


def test_a_ranking_that_holds_at_both_chosen_lrs_is_lr_robust_and_decides():
    result, details = c3(everywhere())
    assert result.verdict.verdict == SUPPORTED, result.verdict
    assert "lr-robust" in result.effect and "lr checked on tuning seeds only" in result.effect
    assert "lr-robust: best-vs-best +0.150; at the chosen lrs +0.150 at 0.004" in details


def test_a_gap_that_comes_from_the_lrs_each_side_got_is_lr_dependent_and_inconclusive():
    # gelu is best at 0.008 and swiglu at 0.002; at gelu's lr swiglu is far worse: the best-vs-best gap (+0.05,
    # SwiGLU better) reverses at a shared lr of 0.008 (−0.40)
    result, details = c3(arm("gelu", (3.50, 3.30, 3.10, 3.00, 3.20), 3.00)
                         + arm("swiglu", (3.10, 2.95, 3.20, 3.40, 3.60), 2.95))
    assert result.verdict.verdict == INCONCLUSIVE
    assert "inconclusive (lr-dependent)" in result.verdict.reason and "would be supported" in result.verdict.reason
    assert "[lr-dependent," in result.effect
    assert "they fall on the other side of the rule's threshold: the gap depends on which lr each side got" in details
    assert "shared-lr differences on the tuning seeds (gelu − swiglu): 0.001: +0.400; 0.002: +0.350" in details


def test_an_optimum_at_the_edge_of_its_grid_is_named_not_bracketed():
    result, details = c3(arm("gelu", (3.60, 3.50, 3.40, 3.30, 3.25), 3.25) + arm("swiglu", GELU, 2.95))
    assert "optimum not bracketed" in result.effect
    assert "gelu: optimum not bracketed (at the upper edge of 5 lrs)" in details
    assert result.scoped.verdict == SUPPORTED  # the label does not change the verdict


def test_the_other_init_agreeing_keeps_the_verdict_and_disagreeing_makes_it_init_dependent():
    gpt2 = arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95)
    fan_in = {"model.init": "fan_in"}
    agree = arm("gelu", RELU, 3.05, fan_in) + arm("swiglu", GELU, 2.95, fan_in)
    result, details = c3(gpt2 + agree)
    assert result.scoped.verdict == SUPPORTED and "init-robust" in result.effect
    assert "init-robust: loss(gelu) − loss(swiglu) at model.init=fan_in" in details
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
    assert result.scoped.verdict == SUPPORTED and "early-training" in result.effect  # still decided at 4×
    assert "the effect shrinks by more than half" in details
    # at 4× the interval contains 0: the length check reads the interval, so 1×'s verdict is not confirmed
    gone = arm("gelu", GELU, 2.95, long) + arm("swiglu", GELU, 2.95, long)
    result, _ = c3(base + gone)
    assert result.scoped.verdict == INCONCLUSIVE and "inconclusive (early-training)" in result.scoped.reason
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
    assert result.scoped.verdict == SUPPORTED, result.scoped


NEAR = {"lr_protocol.judge_neighbours": True}
JUDGED = (0, 1, 2, 3, 4, 5)


def judged_at(act: str, lr: float, loss: float, config: dict | None = None, near: bool = True) -> list[dict]:
    """Judged runs of seeds 0-5 at one lr (a little seed noise), flagged as the neighbour protocol makes them unless
    `near` is False (a variant judged at its chosen lr alone)."""
    return [make_record(act, s, loss + 0.002 * ((s * 7 + len(act)) % 5 - 2), lr=lr,
                        config={**(NEAR if near else {}), **(config or {})}) for s in JUDGED]


def tuning_at(act: str, losses: dict[float, tuple[float, ...]]) -> list[dict]:
    """Tuning runs: at each lr, one loss per tuning seed 7, 8, 9, ..."""
    return [make_record(act, 7 + i, loss, lr=lr, config={"tuning": True}) for lr, per_seed in losses.items()
            for i, loss in enumerate(per_seed)]


def test_c7_reads_the_interval_with_the_lr_choice_in_bits_per_byte():
    """Without biases, gelu's choice between 0.002 and 0.004 turns on one tuning seed, and judged at 0.004 it costs
    0.1 nats: at the chosen lrs alone the cost (+0.005 nats, 0.007 bpb) is below C7's 0.015 bpb margin, but the
    interval with the lr choice in it, in bits per byte, reaches past it: the verdict is not "biases can go"."""
    from ffnbench.claims.bias import BIAS_MARGIN_BPB

    def tuning(bias: bool, losses: dict[float, tuple[float, ...]]) -> list[dict]:
        return [make_record("gelu", 7 + i, loss, lr=lr, bias=bias, config={"tuning": True})
                for lr, per_seed in losses.items() for i, loss in enumerate(per_seed)]

    def judged(bias: bool, lr: float, loss: float) -> list[dict]:
        return judged_at("gelu", lr, loss, {"ffn.bias": bias})

    records = (tuning(True, {0.001: (3.2,) * 5, 0.002: (3.0,) * 5, 0.004: (3.1,) * 5})
               + tuning(False, {0.001: (3.2,) * 5, 0.002: (3.000, 3.000, 3.000, 3.1, 3.1),
                                0.004: (2.9, 2.9, 3.001, 3.001, 3.001), 0.008: (3.3,) * 5})
               + judged(True, 0.002, 3.00) + judged(True, 0.001, 3.2) + judged(True, 0.004, 3.1)
               + judged(False, 0.002, 3.005) + judged(False, 0.001, 3.2) + judged(False, 0.004, 3.10))
    result = {r.claim.id: r for r in evaluate(mark_neighbours([Run.from_record(r) for r in records]),
                                              bench_files=[])}["C7"]
    details = "\n".join(result.details)
    line = next(x for x in details.splitlines() if "interval with the lr choice" in x)
    assert "in bpb" in line and " bpb, 95% CI" in line, line
    import re
    low, high = map(float, re.search(r"bpb, 95% CI \[([-+.\d]+), ([-+.\d]+)\]", line).groups())
    assert low < BIAS_MARGIN_BPB < high, line  # judged-only, the cost sits below the margin
    assert "bpb(no bias) − bpb(bias) = +0.007" in result.effect and "nested bootstrap" in result.effect
    assert result.scoped.verdict == INCONCLUSIVE, result.scoped


def test_the_interval_with_the_lr_choice_is_wider_where_one_tuning_seed_flips_the_choice():
    """gelu's choice between 0.002 and 0.004 turns on one tuning seed (medians 3.000 vs 3.001), and gelu judged at
    0.004 is 0.1 worse: the nested bootstrap, which chooses again on resampled tuning seeds, widens the interval
    that the judged seeds at the chosen lrs alone give."""
    seeds5 = 5
    gelu = tuning_at("gelu", {0.001: (3.2,) * seeds5, 0.002: (3.000, 3.000, 3.000, 3.1, 3.1),
                              0.004: (2.9, 2.9, 3.001, 3.001, 3.001), 0.008: (3.3,) * seeds5})
    swiglu = tuning_at("swiglu", {0.001: (3.1,) * seeds5, 0.002: (2.9,) * seeds5, 0.004: (3.0,) * seeds5})
    judged = (judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 3.10)
              + judged_at("swiglu", 0.002, 2.95) + judged_at("swiglu", 0.001, 2.96) + judged_at("swiglu", 0.004, 2.97))
    result, details = c3(gelu + swiglu + judged)
    line = next(x for x in details.splitlines() if "interval with the lr choice" in x)
    import re
    (lo_n, hi_n), (lo_j, hi_j) = [tuple(map(float, m)) for m in re.findall(r"CI \[([-+.\d]+), ([-+.\d]+)\]", line)]
    assert hi_n - lo_n > 2 * (hi_j - lo_j), line  # the choice's uncertainty dominates
    assert lo_n <= lo_j and hi_n >= hi_j
    # every pair of judged lrs keeps the sign (gelu worse at each): lr-robust across the judged lrs
    assert "lr-robust across the judged lrs" in details and "lr checked on tuning seeds only" not in result.effect


def test_a_pair_of_judged_lrs_that_reverses_the_difference_makes_it_lr_dependent():
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
    swiglu = tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (2.9,) * 3, 0.004: (3.0,) * 3})
    # gelu judged at its upper neighbour beats swiglu at swiglu's lower neighbour: one pair of nine reverses
    judged = (judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 2.90)
              + judged_at("swiglu", 0.002, 2.95) + judged_at("swiglu", 0.001, 3.05) + judged_at("swiglu", 0.004, 2.97))
    result, details = c3(gelu + swiglu + judged)
    assert "lr-dependent across the judged lrs" in details
    assert result.scoped.verdict == INCONCLUSIVE and "inconclusive (lr-dependent)" in result.scoped.reason
    assert "swiglu 0.001 / gelu 0.004: " in details


def test_one_side_judged_at_its_neighbours_checks_its_lr_choice_on_the_judged_seeds_too():
    """Only gelu was judged at its neighbours (a follow-up grid for one variant): the tuning seeds agree at the
    chosen lr, so the check on them alone is lr-robust; gelu's judged pairs are checked as well, and where gelu at
    its upper neighbour beats swiglu the comparison is lr-dependent, where it does not, lr-robust."""
    tuning = (tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
              + tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (2.9,) * 3, 0.004: (3.0,) * 3}))
    swiglu = judged_at("swiglu", 0.002, 2.95, near=False)
    for upper, label, verdict in ((2.90, "lr-dependent", INCONCLUSIVE), (3.10, "lr-robust", SUPPORTED)):
        gelu = judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, upper)
        result, details = c3(tuning + gelu + swiglu)
        assert "shared-lr differences on the tuning seeds" in details  # the tuning check still runs
        assert f"{label} across the judged lrs" in details, details
        assert "swiglu 0.002 / gelu 0.004: " in details and "swiglu 0.001" not in details
        assert result.scoped.verdict == verdict, result.scoped
        assert "lr checked on one side's judged neighbours" in result.effect
        assert "lr checked on tuning seeds only" not in result.effect


def test_one_sides_judged_neighbours_never_pass_what_the_tuning_seeds_fail_or_could_not_check():
    """gelu alone judged at its neighbours, every pair of its judged lrs keeping the sign: where the tuning seeds
    reverse the difference at the chosen lr the comparison stays lr-dependent, and where they could not check it
    (no swiglu tuning run at gelu's chosen lr) the lr stays unchecked; a pair that reverses makes it lr-dependent."""
    gelu_tuning = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
    swiglu = judged_at("swiglu", 0.002, 2.95, near=False)
    gelu = judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 3.10)
    # swiglu's tuning seeds are worse than gelu's at 0.002, the lr they still choose
    reversed_tuning = tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (3.05,) * 3, 0.004: (3.1,) * 3})
    result, details = c3(gelu_tuning + reversed_tuning + gelu + swiglu)
    assert "lr-robust across the judged lrs" in details
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped
    # swiglu tuned on lrs from 0.004 up, judged at 0.004: no paired tuning run at gelu's 0.002
    swiglu_high = (tuning_at("swiglu", {0.004: (2.9,) * 3, 0.008: (3.0,) * 3, 0.016: (3.1,) * 3})
                   + judged_at("swiglu", 0.004, 2.95, near=False))
    result, details = c3(gelu_tuning + swiglu_high + gelu)
    assert "lr-robust across the judged lrs" in details and "not checked: lr" in details, details
    assert "lr-robust" not in result.effect.replace("lr-robust across", ""), result.effect
    gelu_reversing = judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 2.90)
    result, details = c3(gelu_tuning + swiglu_high + gelu_reversing)
    assert "lr-dependent across the judged lrs" in details
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped


def test_an_optimum_next_to_a_plateau_is_named_plateau_edge_with_the_rates():
    plateau = [{"kind": "plateau", "step": 100, "size": 60.0, "recovered": True}]
    records = arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95)
    for r in records:  # every tuning run records its instabilities; gelu's seed 8 plateaus at 0.008
        if r["config"].get("tuning"):
            stuck = r["config"]["ffn"]["act"] == "gelu" and r["seed"] == 8 and r["config"]["optim"]["lr"] == 8e-3
            r["instabilities"] = plateau if stuck else []
    result, details = c3(records)
    assert "plateau-edge" in result.effect
    assert "gelu: plateaued on 0 of 3 tuning seeds at its chosen lr 0.004, 1 of 3 at the next lr above" in details
    assert "swiglu: plateaued" not in details
    for r in records:
        r["instabilities"] = []
    assert "plateau-edge" not in c3(records)[0].effect

