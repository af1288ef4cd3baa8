"""The claims about FFNs that ffnbench tests (docs/claims.md): what each one says, where it comes from,
which runs test it, and the rule that turns their numbers into a verdict — supported, contradicted or
inconclusive.

The metric of every trained claim is the final validation loss in nats/token (bits per byte alongside).
Comparisons are paired by seed: the same seed gives every FFN the same data order and the same non-FFN
initialisation, so a per-seed difference cancels the seed's luck. Every rule is stated in `Claim.rule`, and
the report prints it next to the verdict.

Uniform rules (ffnbench.stats.verdicts): an interval strictly on one side of the threshold decides, otherwise
the verdict is inconclusive; a claim made of parts is their conjunction (stats.multiplicity.combine); a trained
claim whose deciding comparison has fewer than two seeds is at most inconclusive ("one seed: no interval"); a
trained claim with no runs in the sweep is inconclusive with the command that makes them.

Layout: runs (a run and its per-seed statistics), lr_protocol (how a variant's lr is chosen: the sweep plans
by it, the claims judge by it), pairing (comparison keys and paired comparisons),
formatting (effects as text), claim (the registry entry and its verdict), one module per family of claims
(widths, analytic, activations, sparsity, bias, alignment) and registry (every claim, and `evaluate`).
"""

# Each name is imported from its module on first use (PEP 562): importing one module of the package (the sweep
# imports lr_protocol) must not import every claim and scipy with it.
_EXPORTS = {
    "linear_collapse_error": "ffnbench.claims.activations",
    "BENCH_GLOB": "ffnbench.claims.alignment",
    "alignment_rows": "ffnbench.claims.alignment",
    "find_bench_files": "ffnbench.claims.alignment",
    "Claim": "ffnbench.claims.claim",
    "ClaimResult": "ffnbench.claims.claim",
    "Evidence": "ffnbench.claims.claim",
    "Observations": "ffnbench.claims.claim",
    "evaluate_claim": "ffnbench.claims.claim",
    "fmt_ci": "ffnbench.claims.formatting",
    "fmt_interval": "ffnbench.claims.formatting",
    "fmt_mean_std": "ffnbench.claims.formatting",
    "fmt_p": "ffnbench.claims.formatting",
    "Comparison": "ffnbench.claims.pairing",
    "PairKey": "ffnbench.claims.pairing",
    "compare_sides": "ffnbench.claims.pairing",
    "matched_key": "ffnbench.claims.pairing",
    "primary": "ffnbench.claims.pairing",
    "CLAIM_IDS": "ffnbench.claims.registry",
    "CLAIMS": "ffnbench.claims.registry",
    "evaluate": "ffnbench.claims.registry",
    "MODEL_FACTORS": "ffnbench.claims.runs",
    "RUN_FACTORS": "ffnbench.claims.runs",
    "Run": "ffnbench.claims.runs",
    "by_seed": "ffnbench.claims.runs",
    "describe_setting": "ffnbench.claims.runs",
    "group_by": "ffnbench.claims.runs",
    "per_seed_mean": "ffnbench.claims.runs",
    "stat_of": "ffnbench.claims.runs",
    "summary_of": "ffnbench.claims.runs",
}


__all__ = [
    "BENCH_GLOB", "CLAIMS", "CLAIM_IDS", "MODEL_FACTORS", "RUN_FACTORS", "Claim", "ClaimResult", "Comparison",
    "Evidence",
    "Observations", "PairKey", "Run", "alignment_rows", "by_seed", "compare_sides", "describe_setting", "evaluate",
    "evaluate_claim", "find_bench_files", "fmt_ci", "fmt_interval", "fmt_mean_std", "fmt_p", "group_by",
    "linear_collapse_error", "matched_key", "per_seed_mean", "primary", "stat_of", "summary_of",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
