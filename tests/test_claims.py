"""Each claim's rule on small synthetic sweeps with known answers, and the analytic claims."""

import json

import pytest
from fixtures.report.synthetic import SEED_LUCK, make_record, sweep_records

from ffnbench.claims import CLAIM_IDS, CLAIMS, Run, evaluate, linear_collapse_error
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED

SEEDS = (0, 1, 2)
WIGGLE = (0.002, -0.001, 0.0)  # per-seed noise on top of the seed's luck, so differences are not points


def verdicts(records, bench_files=()):
    results = evaluate([Run.from_record(r) for r in records], bench_files=list(bench_files))
    return {r.claim.id: r for r in results}


def losses(act, base, seeds=SEEDS, wiggle=WIGGLE, **factors):
    """One record per seed: base loss + the seed's luck (shared by every variant) + a little noise."""
    return [make_record(act, s, base + SEED_LUCK[s] + wiggle[s % len(wiggle)], **factors) for s in seeds]


def test_registry_covers_the_design_claims():
    assert tuple(f"C{i}" for i in range(1, 14)) == CLAIM_IDS
    for c in CLAIMS:
        assert c.statement and c.source and c.rule and c.why and c.kind in ("analytic", "trained", "benchmark")
        assert c.command.startswith(("make sweep EXP=", "python -m ffnbench params", "make bench"))


def test_analytic_claims_are_supported_without_any_run():
    results = verdicts([])
    for cid in ("C2", "C10", "C11", "C12"):
        assert results[cid].verdict.verdict == SUPPORTED, (cid, results[cid].verdict)
    assert "11008" in results["C2"].effect and "4,831,838,208" in results["C11"].verdict.reason
    assert linear_collapse_error() < 1e-12


def test_trained_claims_without_runs_name_the_sweep_to_run():
    results = verdicts([])
    for cid, exp in (("C1", "widths"), ("C3", "activations"), ("C6", "sparsity"), ("C7", "bias"), ("C8", "depth"),
                     ("C13", "linear")):
        v = results[cid].verdict
        assert v.verdict == INCONCLUSIVE and v.reason == f"not in this sweep: run `make sweep EXP={exp}`"


def test_full_synthetic_sweep_supports_every_trained_claim():
    results = verdicts(sweep_records())
    for cid in CLAIM_IDS:
        expected = INCONCLUSIVE if cid == "C9" else SUPPORTED
        assert results[cid].verdict.verdict == expected, (cid, results[cid].verdict)
        if CLAIMS[CLAIM_IDS.index(cid)].kind == "trained":
            assert results[cid].n == 3


def test_one_seed_sweep_has_no_supported_or_contradicted_trained_verdict():
    results = verdicts(sweep_records(seeds=(0,)))
    for c in CLAIMS:
        if c.kind == "trained":
            assert results[c.id].verdict.verdict == INCONCLUSIVE, c.id
            assert "one seed" in results[c.id].verdict.reason
            assert "1 seed" in results[c.id].effect, (c.id, results[c.id].effect)


@pytest.mark.parametrize(("swiglu_minus_gelu", "expected"),
                         [(-0.05, SUPPORTED), (0.05, CONTRADICTED), (0.0, INCONCLUSIVE)])
def test_c3_swiglu_vs_gelu(swiglu_minus_gelu, expected):
    records = losses("gelu", 3.05) + losses("swiglu", 3.05 + swiglu_minus_gelu, wiggle=(0.0, 0.002, -0.003))
    result = verdicts(records)["C3"]
    assert result.verdict.verdict == expected
    assert "loss(gelu) − loss(swiglu)" in result.effect and result.n == 3


def test_c3_refuses_an_unmatched_budget():
    tight = {"ffn.max_mismatch": 1e-4}  # swiglu at d_model 32 is 0.78% off its budget
    records = losses("gelu", 3.05, config=tight) + losses("swiglu", 2.95, config=tight)
    v = verdicts(records)["C3"].verdict
    assert v.verdict == INCONCLUSIVE and "budget not matched" in v.reason


def test_c1_sweet_spot_and_its_contradiction():
    def widths(l2, l4, l8):
        return [rec for act in ("relu", "gelu") for ratio, base in ((2, l2), (8, l8))
                for rec in losses(act, base, width=ratio)] + losses("relu", l4) + losses("gelu", l4)

    assert verdicts(widths(3.30, 3.10, 3.05))["C1"].verdict.verdict == SUPPORTED  # budget-4 runs count as width 4
    bad = verdicts(widths(3.30, 3.20, 2.90))["C1"]  # 4→8 buys more than 2→4: no diminishing returns
    assert bad.verdict.verdict == CONTRADICTED and "Δ(2→4) − Δ(4→8)" in bad.verdict.reason


def test_c1_at_a_fixed_budget_a_beaten_4x_contradicts():
    n = {"non_embedding_params": 20000}
    records = [rec for act in ("relu", "gelu") for ratio, base in ((2, 3.0), (4, 3.1), (8, 3.2))
               for rec in losses(act, base, width=ratio, **n)]
    v = verdicts(records)["C1"].verdict
    assert v.verdict == CONTRADICTED and "beaten by 2×" in v.reason


def test_c4_uses_the_lr_grid_and_counts_divergences():
    records = (losses("relu", 3.10) + losses("gelu", 3.05) + losses("relu", 3.20, lr=1e-2)
               + losses("gelu", 3.00, lr=1e-2))
    result = verdicts(records)["C4"]
    assert result.verdict.verdict == SUPPORTED
    assert any("each at its best lr (gelu 0.01, relu 0.003)" in line and "decides" in line for line in result.details)
    unstable = records + [make_record("gelu", s, None, lr=3e-2, status="diverged") for s in SEEDS]
    v = verdicts(unstable)["C4"].verdict
    assert v.verdict == CONTRADICTED and "diverged runs: gelu 3, relu 0" in v.reason


@pytest.mark.parametrize(("relu_zero", "gelu_zero", "expected"),
                         [(0.5, 0.0, SUPPORTED), (0.5, 0.01, CONTRADICTED), (0.85, 0.0, CONTRADICTED),
                          (0.65, 0.0, INCONCLUSIVE)])
def test_c5_zero_fractions(relu_zero, gelu_zero, expected):
    records = [make_record("relu", s, 3.1, zero_init=relu_zero + 0.001 * s) for s in SEEDS]
    records += [make_record("gelu", s, 3.0, zero_init=gelu_zero) for s in SEEDS]
    assert verdicts(records)["C5"].verdict.verdict == expected


@pytest.mark.parametrize(("dead", "expected"), [(0.5, SUPPORTED), (0.1, CONTRADICTED), (0.41, INCONCLUSIVE)])
def test_c6_dead_units_at_the_largest_lr(dead, expected):
    records = [make_record("relu", s, 3.1, lr=1e-3, dead=0.02) for s in SEEDS]
    records += [make_record("relu", s, 3.3, lr=3e-2, dead=dead + (0.01, -0.01, 0.005)[s]) for s in SEEDS]
    result = verdicts(records)["C6"]
    assert result.verdict.verdict == expected and "lr 0.03" in result.effect


def test_c6_needs_an_lr_grid():
    v = verdicts([make_record("relu", s, 3.1) for s in SEEDS])["C6"].verdict
    assert v.verdict == INCONCLUSIVE and "needs ≥ 2 learning rates" in v.reason


@pytest.mark.parametrize(("cost", "expected"), [(0.001, SUPPORTED), (0.05, CONTRADICTED)])
def test_c7_biases(cost, expected):
    records = []
    for act in ("relu", "gelu"):
        records += losses(act, 3.1, bias=True) + losses(act, 3.1 + cost, wiggle=(0.0021, -0.0012, 0.0003))
    result = verdicts(records)["C7"]
    assert result.verdict.verdict == expected
    assert any("tokens/s with bias" in line for line in result.details)


def test_c8_depth_interaction():
    records = (losses("relu", 3.10) + losses("swish", 3.06) + losses("relu", 2.95, n_layer=4)
               + losses("swish", 2.85, n_layer=4, wiggle=(0.001, 0.0, -0.002)))
    result = verdicts(records)["C8"]
    assert result.verdict.verdict == SUPPORTED and "depth interaction" in result.effect
    shallow_only = verdicts(losses("relu", 3.10) + losses("swish", 3.06))["C8"].verdict
    assert shallow_only.verdict == INCONCLUSIVE and "needs two depths" in shallow_only.reason


def test_c13_linear_control():
    records = losses("linear", 3.4) + losses("gelu", 3.05) + losses("swiglu", 3.0, wiggle=(0.0, 0.001, 0.002))
    result = verdicts(records)["C13"]
    assert result.verdict.verdict == SUPPORTED and "a linear FFN is one d×d map" in result.verdict.reason


def alignment(tmp_path, accelerator, ns):
    rows = [{"d_ff": d, "multiple_of": m, "ms_median": 1.0, "ms_iqr": 0.02, "params": 2 * 256 * d,
             "ns_per_param": v} for (d, m), v in zip(((682, 1), (704, 64), (768, 256)), ns)]
    path = tmp_path / "bench" / accelerator / "alignment.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"machine": {"label": accelerator, "accelerator": accelerator,
                                            "gpu": "H100" if accelerator == "gpu" else None, "cpu": "EPYC",
                                            "torch": "2.13"}, "rows": rows}))
    return path


@pytest.mark.parametrize(("accelerator", "ns", "expected", "needle"), [
    ("gpu", (2.0, 1.5, 1.4), SUPPORTED, "2 of 2 aligned"),
    ("gpu", (2.0, 2.0, 2.01), CONTRADICTED, "0 of 2 aligned"),
    ("gpu", (2.0, 1.5, 2.0), INCONCLUSIVE, "1 of 2 aligned"),
    ("cpu", (2.0, 1.5, 1.4), INCONCLUSIVE, "no tensor cores"),
])
def test_c9_alignment_benchmark(tmp_path, accelerator, ns, expected, needle):
    result = verdicts([], bench_files=[alignment(tmp_path, accelerator, ns)])["C9"]
    assert result.verdict.verdict == expected and needle in result.verdict.reason
    assert any("| 682 |" in line for line in result.details)  # the numbers are shown, CPU ones too
