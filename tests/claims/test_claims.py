"""The claims: every registered claim against its known answers (tests/fixtures/claims/known_answers.py),
the rules shared by all claims, the registry itself, and the run and pairing types they are built on."""

import math
import re
from pathlib import Path

import pytest
from fixtures.claims.known_answers import (
    KNOWN_ANSWERS,
    SEEDS,
    KnownAnswer,
    losses,
    lr_grid,
    widths_and_stability_arms,
    write_alignment,
)
from fixtures.report.synthetic import make_record, sweep_records

from ffnbench.claims import CLAIM_IDS, CLAIMS, Claim, Evidence, Run, evaluate, linear_collapse_error, registry
from ffnbench.claims.bias import bias_free_key
from ffnbench.claims.pairing import BOOTSTRAP, FRESH_SEEDS, act_is, best_lr, compare_sides, matched_key
from ffnbench.runs.result import RunResult
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

DOCS = Path(__file__).resolve().parents[2] / "docs" / "claims.md"
OWN_HYPOTHESIS = "own hypothesis"  # the source of a claim no article makes (docs/claims.md, "A claim of your own")

# the fixtures start in the practice band under fan_in; the other in-band init the checks read
OTHER_INIT = {"model.init": "scaled", "model.init_gain": 0.55}


def verdicts(records, bench_files=()):
    results = evaluate([Run.from_record(r) for r in records], bench_files=list(bench_files))
    return {r.claim.id: r for r in results}


# ---- the registry ---------------------------------------------------------------------------------------


DESIGN_CLAIMS = tuple(f"C{i}" for i in range(1, 14))  # the design's claims from the five articles


def test_registry_covers_the_design_claims():
    """The design's claims lead, in order; a claim added after them (docs/extending.md) needs no edit here, only
    its section of docs/claims.md, in the registry's order."""
    assert CLAIM_IDS[:len(DESIGN_CLAIMS)] == DESIGN_CLAIMS
    assert len(set(CLAIM_IDS)) == len(CLAIM_IDS) and all(re.fullmatch(r"C\d+", i) for i in CLAIM_IDS), CLAIM_IDS
    assert tuple(_doc_sections()) == CLAIM_IDS
    for c in CLAIMS:
        assert c.statement and c.source and c.rule and c.why and c.kind in ("analytic", "trained", "benchmark")
        assert c.command.startswith(("make sweep EXP=", "python -m ffnbench params", "make bench"))


def test_every_registered_claim_has_known_answers():
    assert set(KNOWN_ANSWERS) == set(CLAIM_IDS)
    assert all(KNOWN_ANSWERS[c.id] for c in CLAIMS)
    for c in CLAIMS:  # every outcome a rule can give has its known answer (an exact rule cannot be inconclusive)
        wanted = {"supported", "contradicted"} | ({"inconclusive"} if c.kind != "analytic" else set())
        assert wanted <= {case.verdict for case in KNOWN_ANSWERS[c.id]}, c.id


def _doc_sections() -> dict[str, str]:
    parts = re.split(r"^## (C\d+) ", DOCS.read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def cited(claim_id: str, source: str) -> str | None:
    """What a claim's `source` cites, as its section's **Sources:** line gives it: the article sections of
    `docs/claims.md §<id> (articles ...)`, or `own hypothesis` for a researcher's own claim (docs/claims.md, "A
    claim of your own"); None for a source of another form."""
    match = re.fullmatch(rf"docs/claims\.md §{claim_id} \((?:articles? (.+)|({OWN_HYPOTHESIS}))\)", source)
    return (match.group(1) or match.group(2)) if match else None


@pytest.mark.parametrize("claim", CLAIMS, ids=CLAIM_IDS)
def test_every_source_points_at_its_section_of_docs_claims_md(claim):
    """A report's source line names docs/claims.md §<id> and what that section's **Sources:** line cites: the same
    article sections, or `own hypothesis`."""
    sources = cited(claim.id, claim.source)
    assert sources, f"{claim.source!r}: not 'docs/claims.md §{claim.id} (articles ...)' nor '... ({OWN_HYPOTHESIS})'"
    assert f"**Sources:** {sources}\n" in _doc_sections()[claim.id]
    for article in re.findall(r"\b00\d\b", sources):
        assert f"| {article} |" in DOCS.read_text()  # listed among the articles


def test_a_source_cites_article_sections_or_an_own_hypothesis():
    assert cited("C14", "docs/claims.md §C14 (own hypothesis)") == "own hypothesis"
    assert cited("C14", "docs/claims.md §C14 (articles 002 §3, 003 §2)") == "002 §3, 003 §2"
    for bad in ("docs/claims.md §C14 (own)", "docs/claims.md §C14", "docs/claims.md §C1 (own hypothesis)", "docs"):
        assert cited("C14", bad) is None, bad


def test_a_claim_is_rejected_with_an_unknown_kind_or_without_its_experiment():
    fields = dict(id="X", statement="s", source="docs", needs="n", rule="r", why="w", evaluate=lambda obs: Evidence())
    with pytest.raises(ValueError, match="kind 'measured'"):
        Claim(kind="measured", **fields)
    with pytest.raises(ValueError, match="names the experiment"):
        Claim(kind="trained", **fields)


def test_a_claim_added_through_the_registry_alone_is_evaluated(monkeypatch):
    """One registry entry is all a new claim needs to be evaluated with the others."""
    def gelu_under_3(obs):
        gelu = [r for r in obs.runs if r.act == "gelu" and r.usable]
        if not gelu:
            return Evidence()
        worst = max(r.loss for r in gelu)
        return Evidence(parts=[("gelu below 3 nats", Verdict(SUPPORTED if worst < 3 else CONTRADICTED,
                                                             f"worst gelu loss {worst:.2f}"))],
                        effect=f"worst gelu loss {worst:.2f}", n=len({r.seed for r in gelu}), details=["- gelu"])

    extra = Claim(id="C99", statement="GELU stays below 3 nats.", source="docs/claims.md §C99 (article 000)",
                  kind="trained", experiment="activations", needs="gelu runs", rule="supported if every gelu run "
                  "ends below 3 nats", why="a test claim", evaluate=gelu_under_3)
    monkeypatch.setattr(registry, "CLAIMS", (*registry.CLAIMS, extra))
    results = verdicts(losses("gelu", 2.5))
    assert list(results) == [*CLAIM_IDS, "C99"]
    added = results["C99"]
    assert added.claim is extra and added.verdict == Verdict(SUPPORTED, "gelu below 3 nats: worst gelu loss 2.52")
    assert (added.effect, added.n, added.details) == ("worst gelu loss 2.52", 3, ["- gelu"])
    assert verdicts([])["C99"].verdict.reason == "not in this sweep: run `make sweep EXP=activations`"


# ---- known answers --------------------------------------------------------------------------------------

CASES = [(cid, case) for cid, cases in KNOWN_ANSWERS.items() for case in cases]


@pytest.mark.parametrize(("cid", "case"), CASES, ids=[f"{cid}-{case}" for cid, case in CASES])
def test_known_answer(cid: str, case: KnownAnswer, tmp_path, monkeypatch):
    if case.patch:  # an analytic claim fed wrong numbers
        case.patch(monkeypatch)
    bench = [write_alignment(tmp_path, *case.alignment)] if case.alignment else []
    result = verdicts(case.records(), bench)[cid]
    # the rule's outcome where the runs ran; a decided one with a factor no run varied is not the claim's verdict
    scoped = result.scoped or result.verdict
    assert scoped.verdict == case.verdict, scoped
    if result.unchecked and scoped.verdict != INCONCLUSIVE:
        assert result.verdict.verdict == INCONCLUSIVE, result.verdict
        assert f"{', '.join(result.unchecked)} unchecked" in result.verdict.reason, result.verdict.reason
    else:
        assert result.verdict == scoped
    text = "\n".join([result.verdict.reason, result.effect, *result.details])
    for needle in case.needles:
        assert needle in text, needle


# ---- the rules every claim shares -----------------------------------------------------------------------


def test_trained_claims_without_runs_name_the_sweep_to_run():
    results = verdicts([])
    for c in CLAIMS:
        if c.kind == "trained":
            v = results[c.id].verdict
            assert v.verdict == INCONCLUSIVE and v.reason == f"not in this sweep: run `make sweep EXP={c.experiment}`"
        elif c.kind == "analytic":
            assert results[c.id].verdict.verdict == SUPPORTED, (c.id, results[c.id].verdict)


def test_full_synthetic_sweep_supports_every_trained_claim():
    results = verdicts(sweep_records() + widths_and_stability_arms())
    for c in CLAIMS:
        expected = INCONCLUSIVE if c.kind == "benchmark" else SUPPORTED
        result = results[c.id]
        assert (result.scoped or result.verdict).verdict == expected, (c.id, result.verdict)
        if result.unchecked:  # one lr, one init, one length: supported where it ran, undecided as a claim
            assert result.verdict.verdict == INCONCLUSIVE and "unchecked" in result.verdict.reason
        if c.kind == "trained":
            assert results[c.id].n == 3


def test_one_seed_sweep_has_no_supported_or_contradicted_trained_verdict():
    results = verdicts(sweep_records(seeds=(0,)) + widths_and_stability_arms(seeds=(0,)))
    for c in CLAIMS:
        if c.kind == "trained":
            assert results[c.id].verdict.verdict == INCONCLUSIVE, c.id
            assert "one seed" in results[c.id].verdict.reason
            assert "1 seed" in results[c.id].effect, (c.id, results[c.id].effect)


def test_the_deciding_comparison_is_marked():
    details = verdicts(lr_grid())["C4"].details
    deciding = [line for line in details if "decides the verdict" in line]
    assert len(deciding) == 1 and "each at its best lr (gelu 0.01, relu 0.003)" in deciding[0]
    assert deciding[0].endswith("(n = 3) ← decides the verdict")


def test_linear_collapse_error_is_rounding_only():
    assert linear_collapse_error() < 1e-12


# ---- runs and pairing -----------------------------------------------------------------------------------


def test_run_from_result_keeps_the_record_and_reads_its_fields():
    result = RunResult.from_json(make_record("swiglu", seed=2, loss=3.25, lr=1e-2, bias=True))
    run = Run.from_result(result)
    assert run.result is result
    assert (run.name, run.act, run.seed, run.lr, run.bias, run.gated, run.sizing, run.ratio) == \
        ("swiglu-b4-bias-lr0.01-L2-s2", "swiglu", 2, 0.01, True, True, "budget", 4.0)
    assert run.loss == 3.25 and run.usable and run.factor("model.n_layer") == 2


def test_run_with_a_non_finite_loss_is_not_usable():
    record = make_record("gelu", loss=3.0)
    record["metrics"]["final_val_loss"] = math.nan
    run = Run.from_record(record)
    assert run.loss is None and not run.usable


def test_run_from_an_incomplete_record_names_the_missing_field():
    record = make_record("gelu")
    del record["ffn"]["d_ff"]
    with pytest.raises(KeyError, match="d_ff"):
        Run.from_record(record)


def test_pair_keys_say_what_was_held_fixed():
    run = Run.from_record(make_record("relu", multiple_of=64))
    setting = "micro (d_model 32, 2 layers, fan_in init)"
    assert matched_key(run).describe() == f"{setting}, budget 4× (params of a 4·d ungated FFN), no FFN bias, " \
                                          "d_ff multiple of 64"
    assert bias_free_key(run).describe() == f"{setting}, act relu, budget 4× (params of a 4·d ungated FFN), " \
                                            "d_ff multiple of 64"
    gated_by_width = Run.from_record(make_record("swiglu", width=4))
    assert matched_key(gated_by_width) is None  # matches no ungated budget


def test_a_setting_names_its_budget_and_an_initialisation_other_than_the_default():
    from ffnbench.claims import describe_setting

    base = (("model.name", "mini"), ("model.d_model", 64), ("model.n_layer", 4))
    assert describe_setting((*base, ("model.ffn_init", "gpt2"))) == "mini (d_model 64, 4 layers)"
    assert describe_setting((*base, ("model.ffn_init", "matched"))) == "mini (d_model 64, 4 layers, matched FFN init)"
    assert describe_setting((*base, ("model.non_embedding_params", "reference"))) == \
        "mini at the non-embedding params of its d_model 64 model (4 layers; d_model solved per FFN)"
    assert describe_setting((*base, ("model.non_embedding_params", 30000), ("model.ffn_init", "matched"))) == \
        "mini at a fixed 3e+04 non-embedding params (4 layers; d_model solved per FFN, matched FFN init)"


def test_a_setting_in_few_words_names_every_factor_that_differs_from_the_default():
    """A table cell's and a figure legend's words (short_setting): two settings that differ only in the FFN init, or
    only in qk-norm or z-loss, never read alike."""
    from ffnbench.claims.runs import short_setting

    base = (("model.name", "mini"), ("model.d_model", 64), ("model.n_layer", 4), ("model.ffn_init", "gpt2"),
            ("model.init", "fan_in"), ("model.qk_norm", False), ("trainer.tokens_per_param", 6), ("optim.z_loss", 0.0))
    assert short_setting(base) == "mini d64 4L, 6 tok/p, fan_in"
    assert short_setting(base, named=False) == "d64 4L, 6 tok/p, fan_in"
    changed = {"model.ffn_init": "matched", "model.qk_norm": True, "optim.z_loss": 1e-4}
    words = {k: short_setting(tuple((f, changed[f] if f == k else v) for f, v in base)) for k in changed}
    assert words == {"model.ffn_init": "mini d64 4L, 6 tok/p, fan_in, matched FFN init",
                     "model.qk_norm": "mini d64 4L, 6 tok/p, fan_in, qk-norm",
                     "optim.z_loss": "mini d64 4L, 6 tok/p, fan_in, z-loss"}


def test_a_finished_run_without_a_validation_loss_counts_as_diverged_and_tuning_runs_are_marked():
    record = make_record("gelu", loss=3.0, config={"tuning": True})
    record["metrics"]["final_val_loss"] = math.nan
    run = Run.from_record(record)
    assert run.diverged and not run.usable and run.role == "tuning"
    assert Run.from_record(make_record("gelu")).role == "judged"
    assert not Run.from_record(make_record("gelu")).diverged


def test_best_lr_skips_an_lr_where_most_seeds_diverged():
    """lr 0.01 has the lowest loss over its survivors (2.8), but 2 of its 3 seeds diverged: its median is +∞."""
    runs = [Run.from_record(r) for r in [*losses("swiglu", 3.05),
                                         make_record("swiglu", 0, 2.8, lr=1e-2),
                                         *[make_record("swiglu", s, None, lr=1e-2, status="diverged") for s in (1, 2)]]]
    assert best_lr(runs) == 3e-3
    only_dirty = [r for r in runs if r.lr == 1e-2] + [Run.from_record(make_record("swiglu", 0, 2.7, lr=3e-2)),
                                                      Run.from_record(make_record("swiglu", 1, None, lr=3e-2,
                                                                                  status="diverged"))]
    with pytest.raises(ValueError, match="no lr has a finite median"):  # half or more diverged at every lr
        best_lr(only_dirty)


def test_one_bad_seed_of_three_cannot_decide_the_lr():
    """The median: a plateaued seed (3.9) at 0.003 leaves its median at 3.0, below 0.001's 3.1, where a mean (3.3)
    would have chosen 0.001; and one diverged seed of three is +∞ in the median, which it survives."""
    grid = {1e-3: (3.1, 3.1, 3.1), 3e-3: (3.0, 3.0, 3.9)}
    runs = [Run.from_record(make_record("gelu", s, loss, lr=lr)) for lr, ls in grid.items()
            for s, loss in zip((0, 1, 2), ls)]
    assert best_lr(runs) == 3e-3
    runs[-1] = Run.from_record(make_record("gelu", 2, None, lr=3e-3, status="diverged"))
    assert best_lr(runs) == 3e-3
    runs[-2] = Run.from_record(make_record("gelu", 1, None, lr=3e-3, status="diverged"))
    assert best_lr(runs) == 1e-3  # two of three diverged: never chosen


def test_best_lr_counts_one_outcome_per_seed():
    """Failed records and a second run of a seed do not dilute an lr's divergences: 1 of 3 seeds diverged at
    both lrs, so the lower loss wins, whatever else was recorded at the worse lr."""
    worse = [make_record("swiglu", 0, 3.2, lr=3e-3), make_record("swiglu", 1, 3.2, lr=3e-3),
             make_record("swiglu", 2, None, lr=3e-3, status="diverged"),
             *[make_record("swiglu", s, None, lr=3e-3, status="failed") for s in (3, 4, 5)]]
    better = [make_record("swiglu", 0, 3.0, lr=1e-3), make_record("swiglu", 1, 3.0, lr=1e-3),
              make_record("swiglu", 2, None, lr=1e-3, status="diverged")]
    assert best_lr([Run.from_record(r) for r in worse + better]) == 1e-3


def _with_curve(record: dict, gaps: tuple[float, ...]) -> dict:
    """The record's curve replaced by six checkpoints whose last five sit `gaps` above its final loss."""
    final = record["metrics"]["final_val_loss"]
    record["curve"] = [{"step": 10 * i, "tokens": 1000 * i, "val_loss": v, "val_bpb": v / 0.6931}
                       for i, v in enumerate([5.5, *(final + g for g in gaps)])]
    return record


@pytest.mark.parametrize(("swiglu_gaps", "expected"), [((0.0,) * 5, "3/3"), ((0.0, 0.0, 0.2, 0.0, 0.0), "2/3")])
def test_the_sign_along_the_validation_curve_is_counted_over_the_second_half(swiglu_gaps, expected):
    """swiglu ends 0.05 below gelu; at checkpoint 3000 of 5000 it is 0.15 above when `swiglu_gaps` says so:
    the sign flips at one of the three checkpoints ≥ 2500 tokens. Evidence only: the verdict stands."""
    gaps = (0.3, 0.2, 0.05, 0.02, 0.0)
    records = ([_with_curve(r, gaps) for r in losses("gelu", 3.05)]
               + [_with_curve(r, tuple(g + s for g, s in zip(gaps, swiglu_gaps)))
                  for r in losses("swiglu", 3.0, wiggle=(0.0, 0.002, -0.001))])
    result = verdicts(records)["C3"]
    assert f"  - sign holds at {expected} checkpoints of the second half" in result.details
    assert result.scoped.verdict == SUPPORTED


def test_an_lr_tuned_on_tuning_seeds_is_judged_on_fresh_seeds():
    """Tuning runs (seeds 3-5, both lrs) choose each side's lr; only the judged runs (seeds 0-2, at that lr)
    are compared, and the comparison says which protocol decided."""
    tuning = [make_record(act, s, loss + 0.001 * s, lr=lr, config={"tuning": True}) for s in (3, 4, 5)
              for act, lr, loss in (("relu", 3e-3, 3.10), ("relu", 1e-2, 3.20), ("gelu", 3e-3, 3.05),
                                    ("gelu", 1e-2, 3.00))]
    judged = losses("relu", 3.10) + losses("gelu", 3.00, lr=1e-2, wiggle=(0.0, 0.002, -0.001))
    comps = compare_sides([Run.from_record(r) for r in tuning + judged], act_is("gelu"), act_is("relu"),
                          matched_key, ("gelu", "relu"))
    assert [(c.lr, c.protocol, c.n) for c in comps] == [("each at its best lr (gelu 0.01, relu 0.003)", FRESH_SEEDS, 3)]
    assert all(r.role == "judged" for r in (*comps[0].a_runs, *comps[0].b_runs))
    assert "  - lr protocol: lr tuned on tuning seeds, judged on fresh seeds" in verdicts(tuning + judged)["C4"].details


def test_the_lr_protocol_of_every_comparison_is_shown():
    details = verdicts(lr_grid())["C4"].details
    assert details.count("  - lr protocol: one lr") == 2
    assert details.count("  - lr protocol: each at its best lr, chosen on the same seeds — optimistic") == 1


def _with_windows(record: dict, per_window: list[float]) -> dict:
    """The record with its final validation loss recorded per window (centred on its final loss)."""
    loss = record["metrics"]["final_val_loss"]
    shift = loss - sum(per_window) / len(per_window)
    return {**record, "val_windows": [w + shift for w in per_window]}


def test_validation_window_noise_widens_every_paired_comparison():
    """Seed differences of 0.050-0.052 alone decide; add window noise of SD 0.3 over 64 shared windows (a
    standard error near 0.04) and the same comparison is inconclusive, with its noise model named."""
    rng = __import__("numpy").random.default_rng(0)
    noise = rng.normal(0, 0.3, 64).tolist()  # the same windows for every seed: their effect does not average away
    gelu = losses("gelu", 3.00)
    relu = [_with_windows(r, noise) for r in losses("relu", 3.05, wiggle=(0.0, 0.001, 0.002))]
    gelu_w = [_with_windows(r, [0.0] * 64) for r in gelu]
    plain = compare_sides([Run.from_record(r) for r in gelu + losses("relu", 3.05, wiggle=(0.0, 0.001, 0.002))],
                          act_is("gelu"), act_is("relu"), matched_key, ("gelu", "relu"))[0]
    noisy = compare_sides([Run.from_record(r) for r in gelu_w + relu], act_is("gelu"), act_is("relu"),
                          matched_key, ("gelu", "relu"))[0]
    assert plain.noise.startswith("t interval over seeds") and plain.verdict().verdict == SUPPORTED
    assert noisy.noise == BOOTSTRAP and noisy.verdict().verdict == INCONCLUSIVE
    assert noisy.diff.mean == pytest.approx(plain.diff.mean)
    assert "  - noise: hierarchical bootstrap over seeds and validation windows" in noisy.evidence("relu − gelu")


def test_a_difference_below_the_cross_machine_spread_is_flagged_as_no_finding():
    comp = compare_sides([Run.from_record(r) for r in losses("gelu", 3.00) + losses("relu", 3.004)],
                         act_is("gelu"), act_is("relu"), matched_key, ("gelu", "relu"))[0]
    assert any("below the cross-machine spread of identical runs (0.009 nats): not a finding" in line
               for line in comp.evidence("relu − gelu"))


def test_c1_judges_each_width_at_the_lr_its_own_tuning_runs_chose():
    """At a fixed budget each width has tuning runs (seeds 7, 8) at two lrs; the judged runs (seeds 0-2) at each
    width's chosen lr make one series in which 4× is best. At a single shared lr (0.003) 4× would lose to 8×."""
    n = {"non_embedding_params": 20000}
    tuning = [make_record("gelu", s, loss, width=w, lr=lr, config={"tuning": True}, **n)
              for s in (7, 8) for w, best in ((2, 3e-3), (4, 1e-2), (8, 3e-3))
              for lr, loss in ((3e-3, 3.0 if lr_is(best, 3e-3) else 3.2), (1e-2, 3.0 if lr_is(best, 1e-2) else 3.2))]
    judged = (losses("gelu", 3.10, width=2, lr=3e-3, **n) + losses("gelu", 3.00, width=4, lr=1e-2, **n)
              + losses("gelu", 3.08, width=8, lr=3e-3, wiggle=(0.001, 0.0, 0.002), **n)
              + losses("gelu", 3.20, width=4, lr=3e-3, **n))  # 4× at an lr its tuning did not choose: not judged
    result = verdicts(tuning + judged)["C1"]
    fixed = [p for p in result.verdict.reason.split("; ") if "fixed budget" in p]
    assert "each width at its tuned lr (2×: 0.003, 4×: 0.01, 8×: 0.003)" in "\n".join(result.details)
    assert "  - lr protocol: lr tuned on tuning seeds, judged on fresh seeds" in result.details
    assert "loss(8×) − loss(4×) = +0.08" in result.effect, (fixed, result.effect)


def lr_is(a: float, b: float) -> bool:
    return math.isclose(a, b)


def test_tuning_runs_are_judged_by_no_loss_or_zero_statistic():
    """A relu tuning run with 0.99 zeros after training does not change C5's trained reading. (C6 reads tuning runs
    on purpose: relu's lr grid is where its dead fraction per lr is measured, each lr's seeds independent.)"""
    judged = [make_record(act, s, 3.0, zero_final=0.5 + 0.001 * s if act == "relu" else 0.0) for s in (0, 1, 2)
              for act in ("relu", "gelu")]
    odd = [make_record("relu", 9, 3.0, lr=lr, zero_final=0.99, dead=0.9, config={"tuning": True})
           for lr in (3e-3, 3e-2)]
    assert verdicts(judged)["C5"].effect == verdicts(judged + odd)["C5"].effect
    assert "| 0.03 | 1 |" in "\n".join(verdicts(judged + odd)["C6"].details)  # the tuning run's lr, in C6's table


def _tuned(act: str, lrs: tuple[float, float], best: float, base: float, wiggle=(0.0, 0.002, 0.001),
           penalty: float = 0.02, **factors) -> list[dict]:
    """Tuning runs of one variant (seeds 7, 8) at two lrs, `best` the better one (by `penalty`: small enough that
    the ranking holds at both lrs, so lr-robust), and its judged runs at `best`."""
    tuning = [make_record(act, s, base + (0.0 if lr == best else penalty), lr=lr, config={"tuning": True}, **factors)
              for s in (7, 8) for lr in lrs]
    return tuning + losses(act, base, lr=best, wiggle=wiggle, **factors)


def test_c8_pairs_the_two_depths_of_tuned_comparisons_whatever_lrs_they_chose():
    """Each depth and variant chose its own lr: the depth interaction still pairs the two tuned comparisons."""
    records = (_tuned("relu", (2e-3, 4e-3), 4e-3, 3.10, n_layer=2)
               + _tuned("swish", (2e-3, 4e-3), 2e-3, 3.06, (0.001, 0.0, 0.002), n_layer=2)
               + _tuned("relu", (2e-3, 4e-3), 2e-3, 3.00, n_layer=4)
               + _tuned("swish", (2e-3, 4e-3), 4e-3, 2.90, (0.002, 0.0, 0.0005), n_layer=4))
    result = verdicts(records)["C8"]
    assert "depth interaction" in result.effect, result.verdict
    assert result.scoped.verdict == SUPPORTED, result.verdict


def test_c1_ignores_an_activation_without_a_width_arm():
    """The headline relu (budget 4 only) is no width arm: C1 is decided by gelu's fixed-budget arm alone."""
    n = {"non_embedding_params": 20000}
    gelu = [rec for ratio, base, wiggle in ((2, 3.10, (0.0, 0.002, 0.001)), (4, 3.00, (0.001, 0.0, 0.002)),
                                            (8, 3.08, (0.002, 0.001, 0.0)))
            for rec in losses("gelu", base, width=ratio, wiggle=wiggle, **n)]
    result = verdicts(gelu + losses("relu", 3.2))["C1"]
    assert result.scoped.verdict == SUPPORTED, result.verdict
    assert "relu" not in result.scoped.reason


def test_c5_reads_trained_zeros_at_the_lr_the_tuning_runs_chose():
    """relu's tuning runs chose 0.004; its judged runs at the grid lr 0.001 (lower loss on these seeds) have 0.9
    zeros, at 0.004 about half: C5's trained reading is taken at 0.004."""
    tuning = [make_record("relu", s, loss, lr=lr, config={"tuning": True}) for s in (7, 8)
              for lr, loss in ((1e-3, 3.2), (4e-3, 3.0))]
    judged = ([make_record("relu", s, 3.0, lr=4e-3, zero_final=0.5 + 0.001 * s) for s in (0, 1, 2)]
              + [make_record("relu", s, 2.9, lr=1e-3, zero_final=0.9) for s in (0, 1, 2)]
              + [make_record("gelu", s, 3.0, lr=4e-3, zero_final=0.0) for s in (0, 1, 2)])
    result = verdicts(tuning + judged)["C5"]
    assert "relu about half after training (lr 0.004)" in result.verdict.reason, result.verdict
    assert "the lr its tuning runs chose" in "\n".join(result.details)


def test_c5_reads_relu_in_the_base_setting_and_gelus_none_under_every_init_it_trained():
    """Under fan_in (more seeds) relu is 0.9 zeros and gelu 0.1; in the base setting (GPT-2 init, where the verdicts
    are decided) relu is about half and gelu has none. relu's half is read in the base setting; gelu's none is a
    part per init, and fan_in's 0.1 contradicts it there: the claim is contradicted by that part alone."""
    fan_in = OTHER_INIT
    base = ([make_record("relu", s, 3.0, zero_init=0.5 - 0.001 * s, zero_final=0.5 + 0.002 * s) for s in (0, 1, 2)]
            + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)])
    other = ([make_record("relu", s, 2.9, zero_init=0.5 - 0.001 * s, zero_final=0.9, config=fan_in) for s in range(5)]
             + [make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.1, config=fan_in) for s in range(5)])
    result = verdicts(base + other)["C5"]
    # contradicted where it ran; no run varied lr or the length for the trained parts, so the claim is undecided
    assert result.scoped.verdict == CONTRADICTED, result.scoped
    assert result.verdict.verdict == INCONCLUSIVE and "(lr, length unchecked)" in result.verdict.reason
    assert "after training 0.502" in result.effect and "fan_in init 0; scaled 0.55 init 0.1" in result.effect
    parts = dict(result.parts)
    # relu's half is read again under fan_in (0.9 there): the part depends on the init
    assert parts["relu about half after training (lr 0.003)"].verdict == INCONCLUSIVE
    assert "init-dependent" in parts["relu about half after training (lr 0.003)"].reason
    assert parts["gelu no hard zeros after training (fan_in init, lr 0.003)"].verdict == SUPPORTED
    assert parts["gelu no hard zeros after training (scaled 0.55 init, lr 0.003)"].verdict == CONTRADICTED


CELLS = {"base": {"trainer.tokens_per_param": 6}, "fan_in": {"trainer.tokens_per_param": 6, **OTHER_INIT},
         "long": {"trainer.tokens_per_param": 24},
         "fan_in_long": {"trainer.tokens_per_param": 24, **OTHER_INIT}}


def _zeros_in_cells(relu_final: dict[str, float], relu_init: float = 0.5, gelu_diverged: tuple[str, ...] = ()
                    ) -> list[dict]:
    """C5 in each cell of `relu_final` (CELLS): relu and gelu tuned over 0.002/0.003/0.004 (0.003 best) on seeds
    7-9 and judged at 0.003 on seeds 0-2; relu's zero fraction after training is the cell's at every lr. gelu
    diverged on every run of the cells in `gelu_diverged`."""
    out = []
    for cell, final in relu_final.items():
        if cell in gelu_diverged:
            out += [make_record("gelu", s, None, lr=lr, status="diverged", config={**CELLS[cell], "tuning": True})
                    for s in (7, 8, 9) for lr in (2e-3, 3e-3, 4e-3)]
            out += [make_record("gelu", s, None, lr=3e-3, status="diverged", config=CELLS[cell]) for s in (0, 1, 2)]
        for act, zero in (("relu", final), ("gelu", 0.0)) if cell not in gelu_diverged else (("relu", final),):
            init = (lambda s: relu_init + 0.001 * (s % 3)) if act == "relu" else (lambda s: 0.0)
            out += [make_record(act, s, loss + 0.001 * s, lr=lr, zero_init=init(s),
                                zero_final=zero + 0.002 * (s % 3), config={**CELLS[cell], "tuning": True})
                    for s in (7, 8, 9) for lr, loss in ((2e-3, 3.2), (3e-3, 3.0), (4e-3, 3.1))]
            out += [make_record(act, s, 3.0, lr=3e-3, zero_init=init(s), zero_final=zero + 0.002 * s,
                                config=CELLS[cell]) for s in (0, 1, 2)]
    return out


def test_c5_trained_parts_decide_only_where_lr_init_and_length_ran_and_agree():
    """relu zeroes 0.86 after training: read at the tuning grid's neighbours of its lr, under fan_in and at 4× the
    tokens, the part is contradicted in every cell, so the claim is; with fan_in at 0.5 the part depends on the
    init; without the fan_in and 4× cells it is contradicted only where it ran."""
    everywhere = verdicts(_zeros_in_cells({"base": 0.86, "fan_in": 0.86, "long": 0.86}))["C5"]
    assert everywhere.verdict.verdict == CONTRADICTED and not everywhere.unchecked, everywhere.verdict
    details = "\n".join(everywhere.details)
    assert "lr-robust" in details and "init-robust" in details and "length-robust" in details
    assert "lr checked on tuning seeds only" in details  # no judged neighbour runs: the tuning seeds' lrs

    init_dependent = verdicts(_zeros_in_cells({"base": 0.86, "fan_in": 0.5, "long": 0.86}))["C5"]
    part = dict(init_dependent.parts)["relu about half after training (lr 0.003)"]
    assert part.verdict == INCONCLUSIVE and "init-dependent" in part.reason, part
    assert init_dependent.verdict.verdict == INCONCLUSIVE

    alone = verdicts(_zeros_in_cells({"base": 0.86}))["C5"]
    assert alone.scoped.verdict == CONTRADICTED
    assert alone.verdict.verdict == INCONCLUSIVE and "(init, length unchecked)" in alone.verdict.reason, alone.verdict


def test_c5_is_supported_where_every_part_ran_in_every_cell_and_agrees():
    """relu about half and gelu none after training, at the lrs' neighbours, under both inits, each init at 4×."""
    halves = {"base": 0.5, "fan_in": 0.5, "long": 0.5, "fan_in_long": 0.5}
    result = verdicts(_zeros_in_cells(halves))["C5"]
    assert result.verdict.verdict == SUPPORTED and not result.unchecked, result.verdict
    # without fan_in's 4× cell, gelu's fan_in part never ran longer: length unchecked
    shorter = verdicts(_zeros_in_cells({k: v for k, v in halves.items() if k != "fan_in_long"}))["C5"]
    assert shorter.scoped.verdict == SUPPORTED and "(length unchecked)" in shorter.verdict.reason


def test_c5_gelu_never_read_under_the_other_init_leaves_the_init_unchecked():
    """gelu diverged on every run under fan_in: no fan_in part was read, so nothing checks gelu's none under
    another init, whatever relu did there."""
    halves = {"base": 0.5, "fan_in": 0.5, "long": 0.5, "fan_in_long": 0.5}
    result = verdicts(_zeros_in_cells(halves, gelu_diverged=("fan_in", "fan_in_long")))["C5"]
    assert result.scoped.verdict == SUPPORTED, result.scoped
    assert result.verdict.verdict == INCONCLUSIVE and "(init unchecked)" in result.verdict.reason, result.verdict


def test_c5_contradicted_at_init_needs_no_trained_factor():
    """relu zeroes 0.9 of its units at init (no training: no lr, init convention or length to vary): the claim is
    contradicted by that part even where the trained parts' factors never ran."""
    result = verdicts(_zeros_in_cells({"base": 0.5}, relu_init=0.9))["C5"]
    assert result.verdict.verdict == CONTRADICTED, result.verdict
    assert dict(result.parts)["relu about half at init (the article's snippet: random weights)"].verdict \
        == CONTRADICTED


def test_c5_reads_relu_at_init_over_the_base_settings_network_not_another_depth_with_the_same_seeds():
    """Seeds 0-2 of the base network (2 layers) zero half their units at init; a 4-layer arm of the same seeds, another
    network at init, zeroes 0.3: at init the claim reads the base network's half, not a mean of the two networks."""
    base = [make_record("relu", s, 3.0, zero_init=0.5 + 0.001 * s, zero_final=0.5) for s in (0, 1, 2)] + \
        [make_record("relu", s, 3.0, zero_init=0.5 + 0.001 * s, zero_final=0.5, lr=6e-3) for s in (0, 1, 2)]
    deeper = [make_record("relu", s, 3.0, zero_init=0.3, zero_final=0.5, n_layer=4) for s in (0, 1, 2)]
    result = verdicts(base + deeper)["C5"]
    assert result.headline.value.mean == pytest.approx(0.501), result.effect
    assert dict(result.parts)["relu about half at init (the article's snippet: random weights)"].verdict == SUPPORTED


def test_c5_reads_relu_at_init_off_one_network_where_the_base_has_none():
    """relu never ran in the base network (2 layers: gelu's 4 seeds). Two networks one factor from it did: 4 layers
    (seeds 0-2, about 0.5 zero) and 1 layer (seeds 0-1, 0.3). At init the claim reads the one with more seeds,
    never a pool of the two (which, per seed, reads 0.4 for seeds 0 and 1)."""
    base = [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in range(4)]
    deeper = [make_record("relu", s, 3.0, zero_init=0.5 + 0.001 * s, zero_final=0.5, n_layer=4) for s in (0, 1, 2)]
    shallower = [make_record("relu", s, 3.0, zero_init=0.3, zero_final=0.5, n_layer=1) for s in (0, 1)]
    result = verdicts(base + deeper + shallower)["C5"]
    assert result.headline.value.mean == pytest.approx(0.501) and result.headline.value.n == 3, result.effect
    assert dict(result.parts)["relu about half at init (the article's snippet: random weights)"].verdict == SUPPORTED


def test_c5_reads_relu_at_init_in_the_base_network_before_a_farther_one_with_more_seeds():
    """The base network (2 layers, seeds 0-2, about 0.5) against a 1-layer network of 5 seeds at 0.3: closeness to
    the base setting ranks before the seed count (and before the name's order, where 1 layer sorts first); a 1×
    width in the base setting (0.3, 5 seeds) is no textbook network and ranks after both."""
    base = [make_record("relu", s, 3.0, zero_init=0.5 + 0.001 * s, zero_final=0.5) for s in (0, 1, 2)]
    shallower = [make_record("relu", s, 3.0, zero_init=0.3, zero_final=0.5, n_layer=1) for s in range(5)]
    narrower = [make_record("relu", s, 3.0, zero_init=0.3, zero_final=0.5, budget=1) for s in range(5)]
    result = verdicts(base + shallower + narrower)["C5"]
    assert result.headline.value.mean == pytest.approx(0.501) and result.headline.value.n == 3, result.effect


def test_c5_reads_gelu_at_init_off_its_textbook_network_not_its_bias_arm():
    """At init gelu without bias has no hard zeros; a bias arm of the same seeds (made to zero 4%) is another
    network: pooled, every seed would read 2%, over the 1% tolerance. The part reads the no-bias network alone."""
    relu = [make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.5) for s in (0, 1, 2)]
    gelu = [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)]
    biased = [make_record("gelu", s, 3.0, zero_init=0.04, zero_final=0.0, bias=True) for s in (0, 1, 2)]
    assert dict(verdicts(relu + gelu + biased)["C5"].parts)["gelu no hard zeros at init"].verdict == SUPPORTED
    assert dict(verdicts(relu + biased)["C5"].parts)["gelu no hard zeros at init"].verdict == CONTRADICTED


def _dead_in_cells(dead: dict[str, float]) -> list[dict]:
    """C6 in each cell of `dead` (CELLS): relu best at 0.001 (2% dead), its dead fraction at 0.03 the cell's."""
    return [make_record("relu", s, loss, lr=lr, dead=d + (0.01, -0.01, 0.005)[s], config=CELLS[cell])
            for cell, at_large in dead.items() for s in SEEDS
            for lr, loss, d in ((1e-3, 3.1, 0.02), (3e-2, 3.3, at_large))]


def test_c6_decides_only_where_init_and_length_ran_and_agree():
    everywhere = verdicts(_dead_in_cells({"base": 0.5, "fan_in": 0.5, "long": 0.5}))["C6"]
    assert everywhere.verdict.verdict == SUPPORTED and not everywhere.unchecked, everywhere.verdict
    assert "init-robust" in "\n".join(everywhere.details)
    init_dependent = verdicts(_dead_in_cells({"base": 0.5, "fan_in": 0.1, "long": 0.5}))["C6"]
    assert init_dependent.verdict.verdict == INCONCLUSIVE and "init-dependent" in init_dependent.verdict.reason
    alone = verdicts(_dead_in_cells({"base": 0.1}))["C6"]
    assert alone.scoped.verdict == CONTRADICTED
    assert alone.verdict.verdict == INCONCLUSIVE and "(init, length unchecked)" in alone.verdict.reason


def test_c4_stability_counts_only_the_lr_seed_cells_both_activations_ran():
    """relu ran three extra seeds at lr 0.01 where it diverged; gelu did not run them: they do not count."""
    grid = [rec for lr in (3e-3, 1e-2) for rec in losses("gelu", 3.0, lr=lr) + losses("relu", 3.05, lr=lr)]
    extra = [make_record("relu", s, None, lr=1e-2, status="diverged") for s in (3, 4, 5)]
    details = "\n".join(verdicts(grid + extra)["C4"].details)
    assert "relu: 0 of 6 runs diverged" in details and "gelu: 0 of 6 runs diverged" in details


def _depth_cell(shallow: float, deep: float, seeds=SEEDS, **config) -> list[dict]:
    """C8 in one setting (`config` overrides): loss(relu) − loss(swish) of about `shallow` at 2 layers, `deep` at 4."""
    cfg = {"config": config} if config else {}
    luck = {s: 0.01 * ((s * 7) % 5) for s in seeds}
    noise = {2: lambda s: 0.001 * (s % 3), 4: lambda s: 0.002 * ((s + 1) % 3)}  # swish's, per depth
    return [make_record(act, s, base + luck[s] + (noise[layers](s) if act == "swish" else 0.0), n_layer=layers,
                        **cfg)
            for layers, gap in ((2, shallow), (4, deep)) for s in seeds
            for act, base in (("relu", 3.10), ("swish", 3.10 - gap))]


def test_c8s_depth_interaction_is_read_in_the_base_setting_and_checked_like_a_part():
    """Under fan_in (more seeds) swish's edge shrinks with depth; at GPT-2's init (the base) it grows: the
    interaction is the base's. It is read again under fan_in, where it disagrees (init-dependent); with no other
    cell, no run varied its init, length or lr, so a decided interaction leaves the claim undecided."""
    base = _depth_cell(0.04, 0.10)
    fan_in = _depth_cell(0.10, 0.04, seeds=range(6), **OTHER_INIT)
    result = verdicts(base + fan_in)["C8"]
    part = dict(result.parts)["loss(relu) − loss(swish) larger at 4 than at 2 layers"]
    assert "depth interaction = +0.059" in result.effect, result.effect
    assert part.verdict == INCONCLUSIVE and "init-dependent" in part.reason, part
    alone = verdicts(base)["C8"]
    part = dict(alone.parts)["loss(relu) − loss(swish) larger at 4 than at 2 layers"]
    assert alone.scoped.verdict == SUPPORTED and part.verdict == SUPPORTED
    assert alone.verdict.verdict == INCONCLUSIVE and "lr, init, length unchecked" in alone.verdict.reason


C8_GRID = (0.002, 0.00283, 0.004, 0.00566, 0.008)


def _c8_cell(config: dict, gaps: dict[int, float], deep_neighbour_gap: float | None = None,
             tie: bool = False) -> list[dict]:
    """C8 in one setting: relu and swish at 2 and 4 layers, tuned over C8_GRID on seeds 7-9 (0.004 best), judged on
    seeds 0-5 at 0.004 and at its neighbours (×√2, ÷√2); loss(relu) − loss(swish) = gaps[layers] everywhere, but at
    4 layers swish's upper neighbour has `deep_neighbour_gap` where given. `tie`: at 4 layers swish's tuning seed 7
    prefers that upper neighbour (0.00566), so a resample that draws seed 7 twice chooses it."""
    near = {**config, "lr_protocol.judge_neighbours": True}
    out = []
    for layers, gap in gaps.items():
        for act, base in (("relu", 3.10), ("swish", 3.10 - gap)):
            tied = tie and act == "swish" and layers == 4  # at 0.00566: seed 7 lower, 8 and 9 just above 0.004's
            out += [make_record(act, s, base + ({7: -0.01, 8: 0.0095, 9: 0.0105}[s] if tied and i == 3
                                                else 0.05 * abs(i - 2) + 0.001 * s),
                                lr=lr, n_layer=layers, config={**config, "tuning": True})
                    for s in (7, 8, 9) for i, lr in enumerate(C8_GRID)]
            for lr in C8_GRID[1:4]:
                loss = base + (0.01 if lr != 0.004 else 0.0)
                if act == "swish" and layers == 4 and lr == 0.00566 and deep_neighbour_gap is not None:
                    loss = 3.10 + 0.01 - deep_neighbour_gap
                noise = (lambda s: 0.002 * ((s * 3) % 5)) if act == "swish" else (lambda s: 0.0)
                out += [make_record(act, s, loss + 0.01 * ((s * 7) % 4) + noise(s) * (layers / 2), lr=lr,
                                    n_layer=layers, config=near) for s in range(6)]
    return out


def _c8(records: list[dict]):
    from ffnbench.claims.lr_protocol import mark_neighbours

    return {r.claim.id: r for r in evaluate(mark_neighbours([Run.from_record(r) for r in records]),
                                            bench_files=[])}["C8"]


def test_c8s_depth_interaction_counts_the_lr_choice_once_in_its_nested_interval():
    """Swish beats relu by 0.04 at 2 layers and 0.10 at 4, under both inits and at 4× the tokens: supported, its
    interaction lr-robust across the judged lrs. When swish's upper neighbour at 4 layers gains nothing over relu,
    some pair of judged lrs reverses the interaction, but no tuning seed would choose that lr: the nested interval
    (the four lr choices resampled) still lies above 0, so the pair is a label (lr-sensitive), not a veto (DESIGN
    §9). When a tuning seed prefers that neighbour, resamples choose it, the interval reaches below 0: inconclusive."""
    cells = ({"trainer.tokens_per_param": 6}, {"trainer.tokens_per_param": 6, **OTHER_INIT},
             {"trainer.tokens_per_param": 24})
    gaps = {2: 0.04, 4: 0.10}
    part_name = "loss(relu) − loss(swish) larger at 4 than at 2 layers"
    result = _c8([r for c in cells for r in _c8_cell(c, gaps)])
    assert result.verdict.verdict == SUPPORTED and not result.unchecked, result.verdict
    assert "depth interaction = +0.0567" in result.effect and "lr-robust" in result.effect.split("depth interaction")[1]
    assert "nested bootstrap" in "\n".join(result.details)
    flipped = _c8([r for c in cells for r in _c8_cell(c, gaps, deep_neighbour_gap=0.0)])
    part = dict(flipped.parts)[part_name]
    assert part.verdict == SUPPORTED, part
    assert "lr-sensitive" in flipped.effect.split("depth interaction")[1], flipped.effect
    tied = _c8([r for c in cells for r in _c8_cell(c, gaps, deep_neighbour_gap=0.0, tie=True)])
    part = dict(tied.parts)[part_name]
    assert part.verdict == INCONCLUSIVE and "contains 0" in part.reason, part
    assert "depth interaction = +0.0567 nats, 95% CI [-0.05" in tied.effect, tied.effect  # the chosen lrs' estimate


def test_c8s_depth_interaction_concludes_a_null_within_c8s_margin():
    """Swish beats relu by 0.05 at both depths (its seeds' noise grows a little with depth): the interaction's
    interval lies inside ±0.009 (C8's margin, at its floor), so "more so in deeper networks" is contradicted
    (equivalent within the margin), and with it the claim, though swish beats relu at each depth."""
    cells = ({"trainer.tokens_per_param": 6}, {"trainer.tokens_per_param": 6, **OTHER_INIT},
             {"trainer.tokens_per_param": 24})
    result = _c8([r for c in cells for r in _c8_cell(c, {2: 0.05, 4: 0.05})])
    parts = dict(result.parts)
    assert parts["swish beats relu at 2 layers"].verdict == SUPPORTED
    part = parts["loss(relu) − loss(swish) larger at 4 than at 2 layers"]
    assert part.verdict == CONTRADICTED and "equivalent within ±0.009" in part.reason, part
    assert result.verdict.verdict == CONTRADICTED, result.verdict


def test_c1_decides_in_the_reference_series_even_when_another_init_has_more_seeds():
    """Under fan_in (5 seeds) 4× loses to 8×; under GPT-2's init (3 seeds, the reference setting) 4× beats both
    neighbours. The reference series decides (pre-registered, as pairing.primary), fan_in is its init check and is
    shown beside it: the claim is inconclusive (init-dependent), not contradicted by the series with more seeds."""
    n = {"non_embedding_params": 20000}
    fan_in = OTHER_INIT
    ref = [rec for ratio, base, wiggle in ((2, 3.10, (0.0, 0.002, 0.001)), (4, 3.00, (0.001, 0.0, 0.002)),
                                           (8, 3.08, (0.002, 0.001, 0.0)))
           for rec in losses("gelu", base, width=ratio, wiggle=wiggle, **n)]
    other = [make_record("gelu", s, base + 0.01 * s + (0.002, 0.0, 0.001)[(s + k) % 3], width=ratio, config=fan_in, **n)
             for k, (ratio, base) in enumerate(((2, 3.10), (4, 3.00), (8, 2.90))) for s in range(5)]
    result = verdicts(ref + other)["C1"]
    details = "\n".join(result.details)
    assert "loss(8×) − loss(4×) = +0.08" in result.effect, result.effect
    assert result.verdict.verdict == INCONCLUSIVE and "init-dependent" in result.verdict.reason, result.verdict
    assert "Shown beside it, not deciding: gelu" in details and "scaled 0.55 init" in details
    # without the fan_in series the same reference runs support the claim: the check above is what undecides it
    assert verdicts(ref)["C1"].scoped.verdict == SUPPORTED


def test_c5_reads_gelu_under_another_init_in_the_base_settings_init_cell_not_the_arm_with_most_seeds():
    """Under fan_in, gelu ran in the base setting's init cell (3 seeds, 5% exact zeros: contradicted there) and in a
    width arm at a fixed budget (5 seeds, none). fan_in's part reads the init cell, as the base part reads the base
    setting; the width arm, with more seeds, must not decide it (it did, once a C1 arm under fan_in landed)."""
    fan_in = OTHER_INIT
    base = ([make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.5 + 0.002 * s) for s in (0, 1, 2)]
            + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)])
    cell = [make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.05 + 0.001 * s, config=fan_in) for s in (0, 1, 2)]
    width_arm = [make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.0, width=1, non_embedding_params=20000,
                             config=fan_in) for s in range(5)]
    parts = dict(verdicts(base + cell + width_arm)["C5"].parts)
    fan_in_part = next(v for label, v in parts.items()
                       if label.startswith("gelu no hard zeros after training (scaled 0.55"))
    assert fan_in_part.verdict == CONTRADICTED, parts


def test_c1_decides_in_the_shorter_reference_series_even_when_a_longer_one_has_more_seeds():
    """Two GPT-2 series at a fixed budget: 6 tokens/param (3 seeds, 4× best) and 24 tokens/param (5 seeds, 8× best).
    The shorter one decides (the longer is its length check), as the base setting's tie-break has it: more seeds
    at 24 tokens/param do not take the decision over."""
    n = {"non_embedding_params": 20000}
    short = [rec for ratio, base, wiggle in ((2, 3.10, (0.0, 0.002, 0.001)), (4, 3.00, (0.001, 0.0, 0.002)),
                                             (8, 3.08, (0.002, 0.001, 0.0)))
             for rec in losses("gelu", base, width=ratio, wiggle=wiggle, config={"trainer.tokens_per_param": 6}, **n)]
    long = [make_record("gelu", s, base + 0.01 * s + (0.002, 0.0, 0.001)[(s + k) % 3], width=ratio,
                        config={"trainer.tokens_per_param": 24}, **n)
            for k, (ratio, base) in enumerate(((2, 3.10), (4, 3.00), (8, 2.90))) for s in range(5)]
    headline = [rec for act in ("relu", "gelu", "swiglu", "swish", "linear", "relu2")
                for rec in losses(act, 3.0, config={"trainer.tokens_per_param": 6})]  # the base setting
    result = verdicts(headline + short + long)["C1"]
    assert "loss(8×) − loss(4×) = +0.08" in result.effect, result.effect
    assert "early-training" in result.verdict.reason or "early-training" in result.effect, result.verdict


def test_c5_reads_the_textbook_network_not_a_bias_arm_or_a_width_arm_beside_it():
    """Under fan_in gelu ran without bias (3 seeds, 5% zeros), with bias (5 seeds, none) in the same setting, and in
    a width arm at 1× (5 seeds, none). fan_in's part reads the textbook network, without bias; and where the fan_in
    cell has no no-bias gelu at all, the closest setting's textbook network (here at 4× the tokens) before the arms
    with more seeds."""
    fan_in, long = OTHER_INIT, {**OTHER_INIT, "trainer.tokens_per_param": 24}
    base = ([make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.5 + 0.002 * s) for s in (0, 1, 2)]
            + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)])
    beside = ([make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.0, bias=True, config=fan_in) for s in range(5)]
              + [make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.0, width=1, non_embedding_params=20000,
                             config=fan_in) for s in range(5)])

    def fan_in_part(no_bias_config):
        no_bias = [make_record("gelu", s, 2.9, zero_init=0.0, zero_final=0.05 + 0.001 * s, config=no_bias_config)
                   for s in (0, 1, 2)]
        parts = dict(verdicts(base + no_bias + beside)["C5"].parts)
        return next(v for label, v in parts.items()
                    if label.startswith("gelu no hard zeros after training (scaled 0.55"))

    assert fan_in_part(fan_in).verdict == CONTRADICTED
    assert "0.05" in fan_in_part(long).reason, fan_in_part(long)


def test_an_exact_fp32_zero_of_gelu_is_a_pre_activation_below_about_minus_5_5():
    """C5's GELU count is dtype-dependent (docs/claims.md): PyTorch's fp32 GELU returns exactly 0 below x ≈ −5.54
    and never above −5.49, where the true |x·Φ(x)| is under 2e-7: the count reads the fraction below about −5.5."""
    import math

    import torch

    x = torch.linspace(-8, -4, 40001, dtype=torch.float32)
    zero = torch.nn.functional.gelu(x) == 0
    assert bool(zero[x < -5.55].all()) and not bool(zero[x > -5.49].any())
    assert max(abs(v * 0.5 * math.erfc(-v / math.sqrt(2))) for v in x[zero].tolist()) < 2e-7
    assert not bool((torch.nn.functional.gelu(x.double()) == 0).any())  # in float64 no unit is exactly off here


def test_c6_reads_every_seed_at_each_lr_neighbour_runs_included():
    """relu judged at its chosen lr's upper neighbour on 6 fresh seeds, where 3 tuning seeds also ran: C6's lr row
    there counts all 9 seeds, not the 3 tuning seeds alone."""
    from ffnbench.claims.lr_protocol import mark_neighbours

    tuning = [make_record("relu", s, loss, lr=lr, dead=dead, config={"tuning": True})
              for s in (100, 101, 102) for lr, loss, dead in ((0.004, 3.2, 0.05), (0.008, 3.0, 0.1),
                                                              (0.016, 3.1, 0.3))]
    judged = [make_record("relu", s, 3.0, lr=lr, dead=dead, config={"lr_protocol.judge_neighbours": True})
              for s in range(6) for lr, dead in ((0.008, 0.1), (0.004, 0.05), (0.016, 0.3 + 0.01 * s))]
    result = {r.claim.id: r for r in evaluate(mark_neighbours([Run.from_record(r) for r in tuning + judged]),
                                              bench_files=[])}["C6"]
    row = next(line for line in result.details if line.startswith("| 0.016 |"))
    assert row.startswith("| 0.016 | 9 |"), row


def test_c8s_depth_interaction_is_read_at_matched_tokens_where_that_pair_ran_else_labelled_confounded():
    """At equal tokens per parameter 2 layers train half the tokens of 4: the interaction says "depth confounded
    with tokens"; where 2 layers also ran at twice the tokens per parameter (the same tokens as 4 layers), that pair
    is read instead: here swish's edge grows with depth at equal tokens per parameter, not at matched tokens."""
    def with_tokens(records, tokens):
        for r in records:
            r["tokens"] = tokens[(r["config"]["model"]["n_layer"], r["config"]["trainer"].get("tokens_per_param"))]
        return records

    tokens = {(2, 6): 0.6e6, (4, 6): 1.2e6, (2, 12): 1.2e6}
    base = _depth_cell(0.02, 0.10, **{"trainer.tokens_per_param": 6})  # Δ grows from 0.02 to 0.10 with depth
    result = verdicts(with_tokens(base, tokens))["C8"]
    assert "depth confounded with tokens" in result.effect, result.effect
    assert "depth confounded with tokens: at equal tokens per parameter 2 layers trained 0.60M tokens, 4 layers " \
           "1.20M" in "\n".join(result.details)
    # 2 layers at 12 tokens/param: swish's edge there is as large as at 4 layers (no depth effect at matched tokens)
    matched = [r for r in _depth_cell(0.10, 0.10, **{"trainer.tokens_per_param": 12}) if r["config"]["model"]
               ["n_layer"] == 2]
    result = verdicts(with_tokens(base + matched, tokens))["C8"]
    assert "depth confounded with tokens" not in result.effect, result.effect
    assert "depths at matched tokens (1.20M): 2 layers at 12 tokens/param" in "\n".join(result.details)
    assert "2 and 4 layers, fan_in init, 12 and 6 tokens/param: matched tokens, 1.20M" in "\n".join(result.details)
    assert "depth interaction = +0.0000" in result.effect or "depth interaction = -0.00" in result.effect or \
        "depth interaction = +0.00" in result.effect, result.effect


def test_c8s_interaction_at_four_times_the_tokens_without_a_matched_pair_is_shown_and_leaves_length_unchecked():
    """The deciding interaction at matched tokens (2 layers at 12, 4 layers at 6 tokens/param); at 4× the tokens only
    equal tokens per parameter ran (2 layers on half the tokens of 4): that cell reads depth and length at once, so
    it is shown, says so, and cannot decide: the interaction's length is unchecked."""
    def with_tokens(records, tokens):
        for r in records:
            r["tokens"] = tokens[(r["config"]["model"]["n_layer"], r["config"]["trainer"].get("tokens_per_param"))]
        return records

    tokens = {(2, 6): 0.6e6, (4, 6): 1.2e6, (2, 12): 1.2e6, (2, 24): 2.4e6, (4, 24): 4.8e6}
    base = _depth_cell(0.02, 0.10, **{"trainer.tokens_per_param": 6})
    matched = [r for r in _depth_cell(0.10, 0.10, **{"trainer.tokens_per_param": 12})
               if r["config"]["model"]["n_layer"] == 2]
    longer = _depth_cell(0.05, 0.05, **{"trainer.tokens_per_param": 24})
    result = verdicts(with_tokens(base + matched + longer, tokens))["C8"]
    details = "\n".join(result.details)
    line = next(x for x in details.splitlines() if "24 tokens/param" in x and "2 and 4 layers" in x)
    assert "24 tokens/param), " in line and "(depth confounded with tokens: 2.40M and 4.80M tokens)" in line, line
    assert line.endswith("(shown, not deciding)"), line
    interaction = result.effect.split("depth interaction = ")[1]
    assert "(depth confounded with tokens)" in interaction and "length unchecked" in interaction, interaction
    # with a matched pair at 4× too (2 layers at 48 tokens/param), the length cell decides
    tokens[(2, 48)] = 4.8e6
    longer_matched = [r for r in _depth_cell(0.05, 0.05, **{"trainer.tokens_per_param": 48})
                      if r["config"]["model"]["n_layer"] == 2]
    result = verdicts(with_tokens(base + matched + longer + longer_matched, tokens))["C8"]
    interaction = result.effect.split("depth interaction = ")[1]
    assert "length unchecked" not in interaction and "confounded" not in interaction, interaction


def test_c5s_gelu_reading_under_an_init_outside_the_band_is_shown_never_a_part():
    """GELU under GPT-2's init at the fixtures' d_model 32 (std 0.11, outside the practice band) has 10% exact zeros:
    it is shown beside C5's parts, and neither contradicts the claim nor leaves a factor unchecked."""
    base = ([make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.5 + 0.002 * s) for s in (0, 1, 2)]
            + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)])
    gpt2 = [make_record("gelu", s, 3.1, zero_init=0.0, zero_final=0.1, config={"model.init": "gpt2"})
            for s in (0, 1, 2)]
    result = verdicts(base + gpt2)["C5"]
    assert not any("gpt2 init" in label for label, _ in result.parts), result.parts
    assert "gelu after training, gpt2 init (init std 0.11, outside practice: shown, not deciding)" in \
        "\n".join(result.details)


def test_a_run_that_did_not_learn_is_a_failure_of_its_variant_not_a_loss_sample():
    """A finished run whose final loss is above the uniform loss ln V (runs.instability.failed_to_learn) is out of
    the loss statistics and counts as a failure, as a divergence does."""
    learned, lost = make_record("gelu", 0, 3.0), make_record("gelu", 1, 6.0)  # ln 256 = 5.55
    assert Run.from_record(learned).usable and not Run.from_record(learned).diverged
    assert not Run.from_record(lost).usable and Run.from_record(lost).diverged


def test_a_part_read_only_outside_the_practice_band_is_inconclusive_and_an_outside_init_checks_nothing():
    """C5 after training where every run started outside the band (GPT-2's init at d_model 32: 0.11): no setting in
    the practice band; and GELU read beside it under such an init does not count as GELU's init check."""
    gpt2 = {"model.init": "gpt2"}
    outside_only = ([make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.9 + 0.002 * s, config=gpt2)
                     for s in (0, 1, 2)]
                    + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0, config=gpt2) for s in (0, 1, 2)])
    parts = dict(verdicts(outside_only)["C5"].parts)
    after = next(v for label, v in parts.items() if label.startswith("relu about half after training"))
    assert after.verdict == INCONCLUSIVE and "no setting in the practice band" in after.reason, after
    base = ([make_record("relu", s, 3.0, zero_init=0.5, zero_final=0.5 + 0.002 * s) for s in (0, 1, 2)]
            + [make_record("gelu", s, 3.0, zero_init=0.0, zero_final=0.0) for s in (0, 1, 2)])
    result = verdicts(base + [make_record("gelu", s, 3.1, zero_final=0.0, config=gpt2) for s in (0, 1, 2)])["C5"]
    assert "init" in result.unchecked, result.unchecked
