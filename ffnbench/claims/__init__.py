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

from ffnbench.claims.activations import linear_collapse_error
from ffnbench.claims.alignment import BENCH_GLOB, alignment_rows, find_bench_files
from ffnbench.claims.claim import Claim, ClaimResult, Evidence, Observations, evaluate_claim
from ffnbench.claims.formatting import fmt_ci, fmt_interval, fmt_mean_std, fmt_p
from ffnbench.claims.pairing import Comparison, PairKey, compare_sides, matched_key, primary
from ffnbench.claims.registry import CLAIM_IDS, CLAIMS, evaluate
from ffnbench.claims.runs import (
    MODEL_FACTORS,
    RUN_FACTORS,
    Run,
    by_seed,
    describe_setting,
    group_by,
    per_seed_mean,
    stat_of,
    summary_of,
)

__all__ = [
    "BENCH_GLOB", "CLAIMS", "CLAIM_IDS", "MODEL_FACTORS", "RUN_FACTORS", "Claim", "ClaimResult", "Comparison",
    "Evidence",
    "Observations", "PairKey", "Run", "alignment_rows", "by_seed", "compare_sides", "describe_setting", "evaluate",
    "evaluate_claim", "find_bench_files", "fmt_ci", "fmt_interval", "fmt_mean_std", "fmt_p", "group_by",
    "linear_collapse_error", "matched_key", "per_seed_mean", "primary", "stat_of", "summary_of",
]
