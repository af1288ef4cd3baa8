"""The registry: every claim ffnbench tests, in report order, each one entry with keyword fields. Adding a
claim is one entry here (its evaluator in the module of its family) plus its known-answer fixture in
tests/fixtures/claims/known_answers.py; docs/claims.md gives each claim's source."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ffnbench.claims.activations import c3, c4, c8, c13
from ffnbench.claims.alignment import BENCH_GLOB, c9, find_bench_files
from ffnbench.claims.analytic import c2, c10, c11, c12
from ffnbench.claims.bias import BIAS_MARGIN, c7
from ffnbench.claims.claim import Claim, ClaimResult, Observations, evaluate_claim
from ffnbench.claims.runs import Run
from ffnbench.claims.sparsity import c5, c6
from ffnbench.claims.widths import c1

_BETTER = "supported if the 95% CI of Δ lies above 0, contradicted if it lies below 0, inconclusive otherwise"

CLAIMS: tuple[Claim, ...] = (
    Claim(
        id="C1",
        statement="d_ff = 4·d_model is the sweet spot: 2× limits the FFN's capacity, while 8× adds parameters for "
                  "diminishing returns.",
        source="docs/claims.md §C1 (articles 001 §3.4.4, 002 §6.1, 000 common misconceptions)",
        kind="trained", experiment="widths",
        needs="ungated relu and gelu at width ratios 2, 4, 8 (fixed d_model; budget-sized ungated runs count as the "
              "same width), and at a fixed non-embedding budget (model.non_embedding_params)",
        rule="per activation at fixed d_model, paired by seed: Δ(2→4) = loss(2×) − loss(4×) and the effect "
             "Δ(2→4) − Δ(4→8); supported if both 95% CIs lie above 0 (4× helps, and returns diminish past 4×), "
             "contradicted if either lies below 0; at a fixed budget (when run): contradicted if any ratio's loss is "
             "significantly below 4×'s (CI of loss(4×) − loss(r) above 0); all parts must hold",
        why="If 4× is a sweet spot, going from 2× to 4× must buy more loss than going from 4× to 8×, and with the "
            "parameter budget fixed no other ratio should beat it.",
        evaluate=c1,
    ),
    Claim(
        id="C2",
        statement="A SwiGLU FFN at d_ff = 8/3·d_model has the parameters of a 4× ungated FFN (3·d·8/3·d = 8d²), and "
                  "LLaMA-7B's 11008 is 2/3·4·4096 = 10922.67 rounded up to a multiple of 256.",
        source="docs/claims.md §C2 (articles 001 §3.4.4, 002 §3.4 and §6.2, 004 §8)",
        kind="analytic",
        needs="none (exact counts from ffnbench.ffn.size_ffn); lists the budget match of trained gated runs",
        rule="supported iff the exact integer counts are equal (3·768·2048 = 2·768·3072 = 8·768²) and LLaMA-7B's "
             "sizing gives 10922.67 → 11008",
        why="Three d×h matrices hold as many weights as two d×4d ones exactly when h = 8/3·d.",
        evaluate=c2,
    ),
    Claim(
        id="C3",
        statement="At the same parameter budget, a SwiGLU FFN beats a single-path GELU FFN.",
        source="docs/claims.md §C3 (articles 003 §4, 002 §3.4, 004 §7)",
        kind="trained", experiment="activations",
        needs="gelu and swiglu at the same budget ratio, bias and model, paired by seed",
        rule=f"Δ = loss(gelu) − loss(swiglu) at a matched budget (|budget mismatch| ≤ ffn.max_mismatch, else "
             f"inconclusive); {_BETTER}",
        why="The gate's extra expressiveness must show up as lower loss when both FFNs hold the same number of "
            "parameters; otherwise SwiGLU only wins by being bigger.",
        evaluate=c3,
    ),
    Claim(
        id="C4",
        statement="GELU trains better and more stably than ReLU.",
        source="docs/claims.md §C4 (articles 002 §3.2, 003 §3)",
        kind="trained", experiment="activations",
        needs="relu and gelu at a matched budget; an lr grid (`make sweep EXP=lr`) for the stability part",
        rule=f"Δ = loss(relu) − loss(gelu) at a matched budget, each at its best lr when both ran an lr grid; "
             f"{_BETTER}. Stability (lr grid only): diverged runs counted per activation; if they differ, GELU "
             "diverging less is supported, more is contradicted",
        why="Better means lower loss on the same data and budget; more stable means fewer divergences and less "
            "sensitivity across learning rates.",
        evaluate=c4,
    ),
    Claim(
        id="C5",
        statement="ReLU sets about half of the FFN's hidden activations to exactly zero; GELU has no hard zeros.",
        source="docs/claims.md §C5 (articles 000 try it yourself, 001 §3.4.4)",
        kind="trained", experiment="sparsity",
        needs="every relu and gelu run's ffn_stats (init: the validation pass at step 0; final: after training)",
        rule="relu's zero fraction at init (one value per seed): supported if its 95% CI lies within 0.5 ± 0.1, "
             "contradicted if it lies outside 0.5 ± 0.2; gelu: supported if every run has exactly 0 zeros at init, "
             "contradicted if any has one; both parts must hold; trained values are reported",
        why="A symmetric pre-activation is negative half the time, and max(0, x) maps every negative to exactly 0; "
            "x·Φ(x) is 0 only at x = 0.",
        evaluate=c5,
    ),
    Claim(
        id="C6",
        statement="At large learning rates many ReLU units die (zero on every input); 40%+ dead units are reported.",
        source="docs/claims.md §C6 (article 002 §3.1)",
        kind="trained", experiment="sparsity",
        needs="relu (and other variants for comparison) at ≥ 2 learning rates, same setting otherwise",
        rule="dead fraction = units whose output is exactly 0 on every validation token after training, per seed; "
             "at the largest lr with finished runs: supported if its 95% CI is ≥ 0.4, contradicted if the CI lies "
             "below 0.4; needs ≥ 2 lrs",
        why="A large update can push a unit's pre-activation below 0 for every input, after which it gets no "
            "gradient; if that is common at large lrs, the dead fraction should reach the reported 40%.",
        evaluate=c6,
    ),
    Claim(
        id="C7",
        statement="The FFN biases can be dropped, as modern LLMs do, without hurting the model.",
        source="docs/claims.md §C7 (article 002 §2.1)",
        kind="trained", experiment="bias",
        needs="each activation with and without FFN biases at a matched budget, paired by seed",
        rule=f"equivalence per activation: Δ = loss(no bias) − loss(bias); supported if the 95% CI's upper bound is "
             f"below {BIAS_MARGIN:g} nats (the practical margin), contradicted if its lower bound is above it; every "
             "activation must hold; tokens/s shown with and without",
        why="If biases matter, removing them costs loss; a cost reliably below a practical margin means they can "
            "go.",
        evaluate=c7,
    ),
    Claim(
        id="C8",
        statement="Swish (SiLU) is smoother than ReLU and beats it, more so in deep networks.",
        source="docs/claims.md §C8 (article 002 §3.3)",
        kind="trained", experiment="depth",
        needs="relu and swish at a matched budget, at two depths (model.n_layer)",
        rule=f"Δ = loss(relu) − loss(swish) at each depth ({_BETTER}); and the depth interaction "
             "Δ(deep) − Δ(shallow), paired by seed, supported if its CI lies above 0, contradicted if below; all "
             "parts must hold",
        why="A smoother activation should help optimisation, and more so as depth makes optimisation harder.",
        evaluate=c8,
    ),
    Claim(
        id="C9",
        statement="Rounding d_ff up to a multiple of 64/128/256 makes the FFN run faster on tensor cores.",
        source="docs/claims.md §C9 (articles 002 §6.2, 004 §8.2)",
        kind="benchmark",
        needs=f"{BENCH_GLOB} from `make bench` (FFN timings at d_ff 682 / 704 / 768)",
        rule="GPU only: supported if every d_ff that is a multiple of 64 costs less time per parameter than every "
             "unaligned d_ff (682) beyond both interquartile bands, contradicted if none does, inconclusive if some "
             "do; CPU-only data is inconclusive (no tensor cores)",
        why="Aligned shapes tile exactly onto tensor-core fragments; if that matters, the aligned sizes must be "
            "cheaper per parameter, not merely faster because they are smaller.",
        evaluate=c9,
    ),
    Claim(
        id="C10",
        statement="The FFN holds about 2/3 of a block's parameters (BERT-base: FFN 4.7M vs attention 2.4M).",
        source="docs/claims.md §C10 (articles 002 introduction, 000 example 1)",
        kind="analytic",
        needs="none (ffnbench.accounting.count_params on BERT-base, GPT-2 small, LLaMA-7B)",
        rule="supported iff every reference model's FFN ÷ (FFN + attention) is within 2/3 ± 0.01 and BERT-base's "
             "per-layer counts round to 4.7M and 2.4M",
        why="A 4× FFN has 8d² weights against attention's 4d²: 8/12 = 2/3.",
        evaluate=c10,
    ),
    Claim(
        id="C11",
        statement="An FFN layer costs ≈ 4·n·d_model·d_ff FLOPs over n tokens: 4.8e9 for BERT-base at n = 512.",
        source="docs/claims.md §C11 (article 000 example 2)",
        kind="analytic",
        needs="none (the formula, ffnbench.accounting, and torch's FlopCounterMode on a BERT-base FeedForward)",
        rule="supported iff the formula, the accounting module and FlopCounterMode give the same integer and it "
             "rounds to 4.8e9",
        why="Two d×d_ff matmuls per token at 2 FLOPs per multiply-add: 2·2·d·d_ff per token.",
        evaluate=c11,
    ),
    Claim(
        id="C12",
        statement="FFN sizes: 4.7M parameters per layer for BERT-base and GPT-2 small, ≈135M for LLaMA-7B; "
                  "18.9 MB per layer in fp32, ≈227 MB for 12 layers.",
        source="docs/claims.md §C12 (articles 000 table, 002 §3.4)",
        kind="analytic",
        needs="none (ffnbench.accounting.count_params on the reference models)",
        rule="supported iff every number matches the exact count rounded to the documents' precision",
        why="The documents' table is arithmetic on the models' published shapes; it must come out the same.",
        evaluate=c12,
    ),
    Claim(
        id="C13",
        statement="Without a nonlinearity the two FFN linears collapse into one linear map, and the FFN loses its "
                  "point.",
        source="docs/claims.md §C13 (articles 002 §3, 003 §2)",
        kind="trained", experiment="linear",
        needs="linear (no activation) against gelu and swiglu at a matched budget; plus an analytic check",
        rule=f"analytic: a `linear` FeedForward must equal one composed affine map (relative error < 1e-9); trained: "
             f"Δ = loss(linear) − loss(gelu) and loss(linear) − loss(swiglu); {_BETTER}; all parts must hold",
        why="If the two matrices collapse to one map, the FFN can only add a linear map to the residual stream, so "
            "the model must do measurably worse than with a real nonlinearity.",
        evaluate=c13,
    ),
)

CLAIM_IDS = tuple(c.id for c in CLAIMS)


def evaluate(runs: Iterable[Run], bench_files: Iterable[Path] | None = None) -> list[ClaimResult]:
    """Every claim of the registry against these runs and the alignment benchmarks (those found under the
    repository and the working directory when `bench_files` is None)."""
    files = tuple(bench_files) if bench_files is not None else find_bench_files()
    obs = Observations(tuple(runs), files)
    return [evaluate_claim(c, obs) for c in CLAIMS]
