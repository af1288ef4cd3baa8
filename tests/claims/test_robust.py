"""The robustness rules of a deciding comparison (ffnbench.claims.robust), each outcome against a known answer on
C3 (loss(gelu) − loss(swiglu), supported when SwiGLU is better): the practice band (a cell outside it labels, one
inside it decides), lr-robust or lr-dependent on the tuning seeds, lr-sensitive across the judged lrs (a label, the
nested interval deciding), init-robust or init-dependent, length-robust or early-training, the size check at matched
tokens, optimum not bracketed, plateau-edge, reduced grid; and a factor no run varied, which leaves the claim
undecided (its reading where the runs ran kept as `scoped`). The fixtures' runs start in the band (fan_in) unless a
test places them elsewhere."""

from fixtures.report.synthetic import GRID, WIGGLE, make_record
from fixtures.report.synthetic import tuned_arm as arm

from ffnbench.claims import Run, evaluate
from ffnbench.claims.lr_protocol import mark_neighbours
from ffnbench.claims.pairing import PairKey
from ffnbench.claims.robust import cell_check, other_cells
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

# SwiGLU better than GELU at every lr, each best at 0.004: a robust ranking
RELU = (3.40, 3.20, 3.10, 3.15, 3.30)
GELU = (3.25, 3.05, 2.95, 3.00, 3.20)
FAN_IN = {"model.init": "scaled", "model.init_gain": 0.55}  # the other in-band init (the fixtures' own: fan_in)
GPT2 = {"model.init": "gpt2"}  # GPT-2's init at the fixtures' d_model 32: std 0.11, outside the band
SHORT, LONG = {"trainer.tokens_per_param": 6}, {"trainer.tokens_per_param": 24}


def c3(records):
    runs = mark_neighbours([Run.from_record(r) for r in records])
    result = {r.claim.id: r for r in evaluate(runs, bench_files=[])}["C3"]
    return result, "\n".join(result.details)


def everywhere(gelu=RELU, gelu_judged=3.10, swiglu=GELU, swiglu_judged=2.95, fan_in=None, long=None):
    """C3's arms in every cell the rules check: 1× under fan_in (the base), 1× under the other in-band init (scaled
    0.55), 4× the tokens; `fan_in`/`long`: (gelu judged, swiglu judged) there, or the base's."""
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
    assert "not checked: init (one init in the practice band), length" in details
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
    assert result.scoped.verdict == INCONCLUSIVE
    assert "inconclusive (lr-dependent)" in result.scoped.reason and "would be supported" in result.scoped.reason
    assert "[lr-dependent," in result.effect
    assert "they fall on the other side of the rule's threshold: the gap depends on which lr each side got" in details
    assert "shared-lr differences on the tuning seeds (gelu − swiglu): 0.001: +0.400; 0.002: +0.350" in details


def test_an_optimum_at_the_edge_of_its_grid_is_named_not_bracketed():
    result, details = c3(arm("gelu", (3.60, 3.50, 3.40, 3.30, 3.25), 3.25) + arm("swiglu", GELU, 2.95))
    assert "optimum not bracketed" in result.effect
    assert "gelu: optimum not bracketed (at the upper edge of 5 lrs)" in details
    assert result.scoped.verdict == SUPPORTED  # the label does not change the verdict


def test_the_other_init_agreeing_keeps_the_verdict_and_disagreeing_makes_it_init_dependent():
    gpt2 = arm("gelu", RELU, 3.10) + arm("swiglu", GELU, 2.95)  # the base: fan_in
    fan_in = FAN_IN  # the other in-band init
    agree = arm("gelu", RELU, 3.05, fan_in) + arm("swiglu", GELU, 2.95, fan_in)
    result, details = c3(gpt2 + agree)
    assert result.scoped.verdict == SUPPORTED and "init-robust" in result.effect
    assert "init-robust: loss(gelu) − loss(swiglu) at model.init=scaled 0.55 (init std 0.55)" in details
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
    # one judged seed at 4× so far (an arm under way): no interval to compare, so length is unchecked, not early
    one_seed = [r for r in flipped if r["config"].get("tuning") or r["seed"] == 0]
    result, details = c3(base + one_seed)
    assert "early-training" not in result.verdict.reason and "length" in result.unchecked, result.verdict
    assert "one seed at 4× the tokens so far" in details


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


def test_a_pair_of_judged_lrs_that_reverses_the_difference_labels_it_lr_sensitive_and_the_nested_interval_decides():
    """The lr choice is counted once: with neighbour runs on both sides the nested interval (the choice re-made on
    resampled tuning seeds) decides, and a pair of judged lrs on the other side gives the label, not a veto."""
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
    swiglu = tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (2.9,) * 3, 0.004: (3.0,) * 3})
    # gelu judged at its upper neighbour beats swiglu at swiglu's lower neighbour: one pair of nine reverses
    judged = (judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 2.90)
              + judged_at("swiglu", 0.002, 2.95) + judged_at("swiglu", 0.001, 3.05) + judged_at("swiglu", 0.004, 2.97))
    result, details = c3(gelu + swiglu + judged)
    assert "lr-sensitive across the judged lrs" in details and "lr-sensitive" in result.effect
    assert "swiglu 0.001 / gelu 0.004: " in details
    assert result.scoped.verdict == SUPPORTED, result.scoped  # the label does not veto
    assert "lr-dependent" not in result.scoped.reason


def test_one_side_judged_at_its_neighbours_is_checked_on_the_tuning_seeds_alone():
    """Neighbour runs on one side only give no nested interval: the tuning seeds' check decides the lr, as without
    any neighbour runs (the one-sided special case is gone)."""
    tuning = (tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
              + tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (2.9,) * 3, 0.004: (3.0,) * 3}))
    swiglu = judged_at("swiglu", 0.002, 2.95, near=False)
    gelu = judged_at("gelu", 0.002, 3.00) + judged_at("gelu", 0.001, 3.2) + judged_at("gelu", 0.004, 2.90)
    result, details = c3(tuning + gelu + swiglu)
    assert "shared-lr differences on the tuning seeds" in details and "across the judged lrs" not in details
    assert "lr checked on tuning seeds only" in result.effect and result.scoped.verdict == SUPPORTED
    reversed_tuning = tuning_at("swiglu", {0.001: (3.1,) * 3, 0.002: (3.05,) * 3, 0.004: (3.1,) * 3})
    result, _ = c3(tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3}) + reversed_tuning
                   + gelu + swiglu)
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped


def test_a_cell_outside_the_practice_band_that_reverses_the_sign_only_labels_the_verdict():
    """GPT-2's init at d_model 32 starts the FFN at std 0.11, outside the band [0.4, 2]: there gelu beats swiglu,
    and the verdict, decided in the band, stays decided with the label."""
    base = everywhere()
    outside = arm("gelu", GELU, 2.95, {**SHORT, **GPT2}) + arm("swiglu", RELU, 3.10, {**SHORT, **GPT2})
    result, details = c3(base + outside)
    assert result.verdict.verdict == SUPPORTED, result.verdict
    assert "reverses at init std 0.11, outside practice" in result.effect
    assert "model.init=gpt2 (init std 0.11)" in details and "shown, not deciding" in details


def test_a_cell_outside_the_band_whose_estimate_crosses_zero_inside_its_noise_is_labelled_by_its_verdict():
    """A reversal is a decided reading on the other side: an estimate of the other sign whose interval contains 0
    (seeds that disagree) reads "inconclusive at init std ..", never "reverses"."""
    there = {**SHORT, **GPT2}
    gelu = [r for r in arm("gelu", GELU, 2.95, there) if r["config"].get("tuning")]
    gelu += [make_record("gelu", s, loss, lr=0.004, config=there)  # gelu − swiglu by seed: −0.30, +0.15, −0.20
             for s, loss in zip((0, 1, 2), (2.80, 3.25, 2.90), strict=True)]
    result, details = c3(everywhere() + gelu + arm("swiglu", RELU, 3.10, there))
    assert result.verdict.verdict == SUPPORTED, result.verdict
    assert "inconclusive at init std 0.11, outside practice" in result.effect, result.effect
    assert "reverses" not in result.effect and "reverses" not in details
    line = next(x for x in details.splitlines() if "model.init=gpt2" in x)
    assert "= -0.1" in line and ": inconclusive, against supported" in line, line
    # decided, but inside ±m around 0 (contradicted: no gain as large as the margin) with a negative estimate:
    # still no reversal, its interval reaches both sides of 0
    gelu = [r for r in gelu if r["config"].get("tuning")]
    gelu += [make_record("gelu", s, 3.10 + WIGGLE["swiglu"][s] + d, lr=0.004, config=there)
             for s, d in zip((0, 1, 2), (-0.004, +0.002, -0.003), strict=True)]
    result, details = c3(everywhere() + gelu + arm("swiglu", RELU, 3.10, there))
    line = next(x for x in details.splitlines() if "model.init=gpt2" in x)
    assert line.startswith("  - contradicted at init std 0.11, outside practice") and "= -0.0" in line, line
    assert "reverses" not in result.effect, result.effect


def test_an_in_band_cell_that_reverses_the_sign_makes_the_verdict_inconclusive():
    flipped = everywhere(fan_in=(2.90, 3.10))  # under the other in-band init gelu is the better one
    result, _ = c3(flipped)
    assert result.verdict.verdict == INCONCLUSIVE and "inconclusive (init-dependent)" in result.verdict.reason
    assert "the inits in the practice band disagree" in result.verdict.reason


def test_with_no_setting_in_the_practice_band_the_verdict_is_inconclusive():
    result, _ = c3(arm("gelu", RELU, 3.10, GPT2) + arm("swiglu", GELU, 2.95, GPT2))
    assert result.scoped.verdict == INCONCLUSIVE and "no setting in the practice band" in result.scoped.reason
    assert "would be supported" in result.scoped.reason


def test_the_size_check_prefers_the_cell_at_matched_tokens():
    """d_model 64 at 6 tokens/param trains ~4× the tokens of d_model 32 at 6: the size check compares it with
    d_model 32 at 24 tokens/param (matched tokens) where that cell exists, and says so; without it, it compares the
    same lengths and labels the check confounded with tokens."""
    bigger = {"model.d_model": 64, "model.n_head": 2}
    trained = {(32, 6): 1.19e6, (32, 24): 4.77e6, (64, 6): 4.75e6}  # as mini and tiny train in cpu-robust

    def with_tokens(records):
        for r in records:
            r["tokens"] = trained[(r["config"]["model"]["d_model"], r["config"]["trainer"]["tokens_per_param"])]
        return records

    # at d_model 64 (6 tok/param) SwiGLU loses, as at d_model 32 and 24 tok/param; at d_model 32, 6 tok/param it wins
    at_64 = arm("gelu", GELU, 2.95, {**SHORT, **bigger}) + arm("swiglu", RELU, 3.10, {**SHORT, **bigger})
    long_lost = arm("gelu", GELU, 2.95, LONG) + arm("swiglu", RELU, 3.10, LONG)
    short = arm("gelu", RELU, 3.10, SHORT) + arm("swiglu", GELU, 2.95, SHORT)
    result, details = c3(with_tokens(short + long_lost + at_64))
    line = next(x for x in details.splitlines() if x.startswith("  - size-"))
    assert line.startswith("  - size-robust at matched tokens (4.75M)"), line
    assert "at d_model 64" in line and "at d_model 32" in line
    assert "size confounded with tokens" not in result.effect
    result, details = c3(with_tokens(short + at_64))  # no 4× cell at d_model 32: lengths matched, tokens not
    line = next(x for x in details.splitlines() if x.startswith("  - size-"))
    assert line.startswith("  - size-dependent at 1.19M against 4.75M tokens: size confounded with tokens"), line
    assert "size confounded with tokens" in result.effect


def test_a_null_whose_sign_differs_at_the_chosen_lrs_stays_equivalent_the_lr_check_reads_regions_not_signs():
    """gelu and swiglu the same within noise: −0.002 best-vs-best on the judged seeds, +0.001 on the tuning seeds at
    the chosen lr. Both lie inside C3's margin (1% of the loss, 0.03 here), so the lr check keeps the equivalence
    outcome (a null's sign is noise); a real reversal beyond the margin would not."""
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
    swiglu = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (2.999,) * 3, 0.004: (3.1,) * 3})
    judged = judged_at("gelu", 0.002, 3.000, near=False) + judged_at("swiglu", 0.002, 3.002, near=False)
    result, _ = c3(gelu + swiglu + judged)
    assert "lr-robust" in result.effect, result.effect
    assert result.scoped.verdict == CONTRADICTED and "equivalent within ±" in result.scoped.reason, result.scoped
    far = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (2.9,) * 3, 0.004: (3.1,) * 3})  # +0.1 on the tuning seeds
    result, _ = c3(gelu + far + judged)
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped


def test_a_second_size_outside_the_practice_band_is_shown_and_never_vetoes():
    """GPT-2's init starts d_model 512 at std 0.45 (inside the band) and d_model 256 at 0.32 (outside): a reversal
    at 256 is a sensitivity label, as the GPU presets' small (0.39) is beside base (0.55)."""
    base = {**SHORT, **GPT2, "model.d_model": 512, "model.n_head": 2}
    small = {**SHORT, **GPT2, "model.d_model": 256, "model.n_head": 2}
    records = (arm("gelu", RELU, 3.10, base) + arm("swiglu", GELU, 2.95, base)
               + arm("gelu", GELU, 2.95, small) + arm("swiglu", RELU, 3.10, small))
    result, _ = c3(records)
    assert result.scoped.verdict == SUPPORTED, result.scoped
    assert "contradicted at d_model 256, init std 0.32, outside practice" in result.effect, result.effect
    assert "size-dependent" not in result.effect


def test_each_cell_reads_its_lr_check_by_its_own_outcome_row():
    """At 4× the tokens gelu and swiglu are equal within noise (an equivalence there, its tuning seeds' sign the
    other way inside the margin), while at 1× the interval is wide: the 4× cell reads as contradicted (equivalent),
    not undone by the sign of a null, whatever row the deciding cell is in."""
    def tuning(act, losses, config):
        return [make_record(act, 7 + i, loss, lr=lr, config={"tuning": True, **config})
                for lr, per_seed in losses.items() for i, loss in enumerate(per_seed)]

    short = (tuning("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3}, SHORT)
             + tuning("swiglu", {0.001: (3.2,) * 3, 0.002: (2.99,) * 3, 0.004: (3.1,) * 3}, SHORT)
             + [make_record("gelu", s, 3.0 + (0.04, -0.05, 0.06)[s], lr=0.002, config=SHORT) for s in range(3)]
             + [make_record("swiglu", s, 2.99, lr=0.002, config=SHORT) for s in range(3)])
    long = (tuning("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3}, LONG)
            + tuning("swiglu", {0.001: (3.2,) * 3, 0.002: (2.999,) * 3, 0.004: (3.1,) * 3}, LONG)
            + [make_record("gelu", s, 3.000 + 0.001 * s, lr=0.002, config=LONG) for s in range(3)]
            + [make_record("swiglu", s, 3.002, lr=0.002, config=LONG) for s in range(3)])
    _, details = c3(short + long)
    line = next(x for x in details.splitlines() if "tokens/param (" in x and ("early-training" in x or "length" in x))
    assert ": contradicted, against" in line, line


def test_a_contradiction_below_zero_keeps_its_region_below_the_margin_on_the_tuning_seeds():
    """swiglu 0.1 worse than gelu on the judged seeds: contradicted (the interval lies below 0). The tuning seeds put
    swiglu 0.01 ahead at the chosen lr, inside C3's margin (0.03): still no gain as large as m, the same region of
    the outcome table, so the contradiction stands (it read the sign, and undecided the stronger contradiction while
    keeping a weaker one); 0.1 ahead there would be another region: lr-dependent."""
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0,) * 3, 0.004: (3.1,) * 3})
    judged = judged_at("gelu", 0.002, 3.000, near=False) + judged_at("swiglu", 0.002, 3.100, near=False)
    near = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (2.99,) * 3, 0.004: (3.1,) * 3})
    result, _ = c3(gelu + near + judged)
    assert result.scoped.verdict == CONTRADICTED and "lies below 0" in result.scoped.reason, result.scoped
    far = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (2.9,) * 3, 0.004: (3.1,) * 3})
    result, _ = c3(gelu + far + judged)
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped


def test_a_withheld_nested_interval_leaves_the_lr_to_the_tuning_seeds_check():
    """Both sides judged at their neighbours, but gelu's upper neighbour diverged on every judged seed, and tuning
    seed 9 alone prefers it: 7 resamples in 27 choose an lr with no judged contrast, so there is no nested interval.
    The lr is then checked on the tuning seeds (swiglu worse at the chosen lr there: lr-dependent), and the report
    says why; before, the verdict read the judged seeds alone with no lr check at all."""
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0, 3.0, 3.05), 0.004: (3.1, 3.1, 2.9)})
    swiglu = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (3.1,) * 3, 0.004: (3.2,) * 3})
    diverged = [{**r, "status": "diverged"} for r in judged_at("gelu", 0.004, 3.0)]
    judged = (judged_at("gelu", 0.002, 3.05) + judged_at("gelu", 0.001, 3.2) + diverged
              + judged_at("swiglu", 0.002, 2.95) + judged_at("swiglu", 0.001, 3.05) + judged_at("swiglu", 0.004, 3.0))
    result, details = c3(gelu + swiglu + judged)
    assert "no nested interval" in details and "interval with the lr choice" not in details, details
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped


def test_a_judged_lr_where_some_seeds_diverged_has_no_contrast_its_survivors_do_not_stand_in():
    """As above, but only 2 of gelu's 6 judged seeds diverged at 0.004, seeds swiglu finished (the 4 survivors look
    good, 2.90): a contrast of the survivors alone would read gelu better there than it ran. The lr has no judged
    contrast, the nested interval is withheld, and the tuning seeds' check decides the lr; a diverged seed that swiglu
    never ran leaves the nested interval standing."""
    gelu = tuning_at("gelu", {0.001: (3.2,) * 3, 0.002: (3.0, 3.0, 3.05), 0.004: (3.1, 3.1, 2.9)})
    swiglu = tuning_at("swiglu", {0.001: (3.2,) * 3, 0.002: (3.1,) * 3, 0.004: (3.2,) * 3})
    upper = [{**r, "status": "diverged"} if i < 2 else r for i, r in enumerate(judged_at("gelu", 0.004, 2.90))]
    judged = (judged_at("gelu", 0.002, 3.05) + judged_at("gelu", 0.001, 3.2) + upper
              + judged_at("swiglu", 0.002, 2.95) + judged_at("swiglu", 0.001, 3.05) + judged_at("swiglu", 0.004, 3.0))
    result, details = c3(gelu + swiglu + judged)
    assert "no nested interval" in details and "interval with the lr choice" not in details, details
    assert result.scoped.verdict == INCONCLUSIVE and "lr-dependent" in result.scoped.reason, result.scoped
    extra = make_record("gelu", 40, 3.0, lr=0.004, config=NEAR)
    result, details = c3(gelu + swiglu + judged_at("gelu", 0.004, 2.90) + [{**extra, "status": "diverged"}]
                         + [r for r in judged if r["config"]["optim"]["lr"] != 0.004 or "gelu" not in r["name"]])
    assert "interval with the lr choice" in details and "no nested interval" not in details, details


def test_a_part_read_in_two_cells_outside_the_band_with_one_verdict_gets_one_label_and_a_line_per_cell():
    """C5's relu after training read under GPT-2's init and at init gain 0.32: "contradicted outside the band" once
    among the labels, each cell on its own line; a second verdict there gets its own label."""
    no = Verdict(CONTRADICTED, "outside [0.3, 0.7]")
    cells = {"init": [("gpt2 init", no, False), ("scaled 0.32 init", no, False), ("fan_in, 0.55", no, True)]}
    out = cell_check(no, "fan_in", cells)
    assert out.labels.count("contradicted outside the band") == 1, out.labels
    assert sum("outside the practice band: shown, not deciding" in x for x in out.lines) == 2, out.lines
    cells["init"].append(("tiny init", Verdict(INCONCLUSIVE, "an interval straddles"), False))
    labels = cell_check(no, "fan_in", cells).labels
    assert labels[:2] == ["contradicted outside the band", "inconclusive outside the band"], labels


def test_c1_counts_the_lr_choice_of_each_width_in_its_interval():
    """C1 reads each width at its tuned lr; where every width was judged at its chosen lr's neighbours too, its
    interval is the nested one, as every claim's, from that width's own neighbour runs. 2× trails 4× at every lr of
    the tuning seeds, but 4×'s choice between 0.002 and 0.00283 turns on one tuning seed, and 4× judged at 0.00283 is
    0.1 worse: at the chosen lrs alone 4× beats 2× by 0.05 (supported), while the interval with the choice re-made on
    resampled tuning seeds reaches past 0, and the part is not decided. A series without neighbour runs borrows none
    from another that has them."""
    budget = {"non_embedding_params": 20000}
    lo, mid, hi = 0.00141, 0.002, 0.00283  # a lattice lr and its neighbours (×√2, ÷√2)

    def width(ratio: float, tuning: dict[float, tuple[float, ...]], judged: dict[float, float], near: bool = True,
              config: dict | None = None) -> list[dict]:
        flag = {"lr_protocol.judge_neighbours": True} if near else {}
        return ([make_record("gelu", 7 + i, loss, lr=lr, width=ratio, config={"tuning": True, **(config or {})},
                             **budget) for lr, per_seed in tuning.items() for i, loss in enumerate(per_seed)]
                + [make_record("gelu", s, loss + 0.002 * ((s * 7 + int(ratio)) % 5 - 2), lr=lr, width=ratio,
                               config={**flag, **(config or {})}, **budget)
                   for lr, loss in judged.items() for s in range(6)])

    worse = {lo: (3.3,) * 5, mid: (3.1,) * 5, hi: (3.2,) * 5}
    fragile = {lo: (3.2,) * 5, mid: (3.000, 3.000, 3.000, 3.1, 3.1), hi: (2.9, 2.9, 3.001, 3.001, 3.001)}

    def part(near: bool) -> tuple[Verdict, str]:
        # each width's neighbours lose differently: runs taken from the wrong width change the pairs below
        judged_2, judged_8 = ({mid: 3.05} | ({lo: 3.3, hi: loss} if near else {}) for loss in (3.25, 3.15))
        judged_4 = {mid: 3.00} | ({lo: 3.2, hi: 3.10} if near else {})
        # the longer series is judged at its neighbours where the deciding one is not, and the other way round
        longer, far = {"trainer.tokens_per_param": 24}, {} if near else {lo: 3.3, hi: 2.9}
        records = (width(4, fragile, judged_4, near) + width(2, worse, judged_2, near)
                   + width(8, worse, judged_8, near) + width(4, fragile, {mid: 3.00} | far, not near, longer)
                   + width(2, worse, {mid: 3.05} | far, not near, longer)
                   + width(8, worse, {mid: 3.05} | far, not near, longer))
        result = {r.claim.id: r for r in evaluate(mark_neighbours([Run.from_record(r) for r in records]),
                                                  bench_files=[])}["C1"]
        return next(v for name, v in result.parts if "beats 2×" in name), "\n".join(result.details)

    alone, details = part(near=False)
    assert alone.verdict == SUPPORTED and "interval with the lr choice" not in details, alone
    nested, details = part(near=True)
    assert nested.verdict == INCONCLUSIVE, nested
    assert details.count("interval with the lr choice") == 2, details  # 2× and 8× against 4×, at 6 tokens/param
    # each width's own neighbours: 3.25 − 3.10 and 3.15 − 3.10, less the fixture's seed wiggle
    assert "gelu 4× 0.00283 / gelu 2× 0.00283: +0.1493" in details
    assert "gelu 4× 0.00283 / gelu 8× 0.00283: +0.0497" in details


def test_the_cells_a_part_is_checked_across_come_in_one_order_whatever_order_the_settings_came_in():
    """C5 and C6 gather their settings in a set, whose order follows the hash seed: the cells (and the report's lines
    of them) must not, or the report does not rebuild byte for byte."""
    def key(init: str, gain: float, tpp: int = 6) -> PairKey:
        return PairKey((("model.init", init), ("model.init_gain", gain), ("trainer.tokens_per_param", tpp)),
                       act="relu", budget=4)

    base, others = key("fan_in", 1.0), [key("scaled", 0.55), key("scaled", 0.32), key("fan_in", 1.0, 24)]
    forward, backward = other_cells(base, [base, *others]), other_cells(base, [base, *reversed(others)])
    assert forward == backward
    assert len(forward["init"]) == 2 and forward["length"] == [key("fan_in", 1.0, 24)]


def test_a_cell_outside_the_band_reverses_only_if_its_interval_with_the_lr_choice_lies_across_the_threshold():
    """Under GPT-2's init (outside the band) gelu beats swiglu by 0.1 at the chosen lrs, every seed alike: on the
    judged seeds alone a reversal. But swiglu's choice between 0.002 and 0.004 turns on one tuning seed, and at 0.004
    swiglu is 0.1 ahead: the interval with the lr choice, the one the cell's verdict reads, reaches both sides of 0,
    so the cell is labelled by its verdict, not "reverses"."""
    there = {**SHORT, **GPT2}

    def tuning(act: str, losses: dict[float, tuple[float, ...]]) -> list[dict]:
        return [make_record(act, 7 + i, loss, lr=lr, config={"tuning": True, **there})
                for lr, per_seed in losses.items() for i, loss in enumerate(per_seed)]

    outside = (tuning("gelu", {0.001: (3.2,) * 5, 0.002: (3.0,) * 5, 0.004: (3.1,) * 5})
               + tuning("swiglu", {0.001: (3.2,) * 5, 0.002: (3.000, 3.000, 3.000, 3.1, 3.1),
                                   0.004: (2.9, 2.9, 3.001, 3.001, 3.001)})
               + judged_at("gelu", 0.002, 2.90, there) + judged_at("gelu", 0.001, 3.2, there)
               + judged_at("gelu", 0.004, 3.1, there) + judged_at("swiglu", 0.002, 3.00, there)
               + judged_at("swiglu", 0.001, 3.2, there) + judged_at("swiglu", 0.004, 2.80, there))
    result, details = c3(everywhere() + outside)
    line = next(x for x in details.splitlines() if "model.init=gpt2" in x)
    assert "reverses" not in line and "at init std 0.11, outside practice" in line, line
    assert "reverses" not in result.effect, result.effect
