"""The registry: every claim ffnbench tests, in report order, each one entry with keyword fields. Adding a
claim is one entry here (its evaluator in the module of its family) plus its known-answer fixture in
tests/fixtures/claims/known_answers.py; docs/claims.md gives each claim's source."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ffnbench.claims.activations import c3, c4, c8, c13
from ffnbench.claims.alignment import BENCH_GLOB, c9, find_bench_files
from ffnbench.claims.analytic import c2, c10, c11, c12
from ffnbench.claims.band import BAND_SOURCES, PRACTICE_BAND
from ffnbench.claims.bias import BIAS_MARGIN_BPB, c7
from ffnbench.claims.claim import Claim, ClaimResult, Observations, evaluate_claim
from ffnbench.claims.margins import describe as margin
from ffnbench.claims.runs import Run
from ffnbench.claims.sparsity import DEAD_REPORTED, GELU_ZERO_TOL, HALF_BAND, HALF_OUTER, c5, c6
from ffnbench.claims.widths import c1

_BETTER = "the outcome table"
# The rules every trained comparison shares, stated once (REPORT.md's Method; docs/claims.md): a claim's own rule
# names them by these names.
SHARED_RULES = {
    "the practice band": (
        f"a verdict is decided from the settings whose FFN pre-activation std at init lies in [{PRACTICE_BAND[0]:g}, "
        f"{PRACTICE_BAND[1]:g}] ({BAND_SOURCES}; claims.band: 0.02·√d_model under GPT-2's init, 1 under fan_in, the "
        "gain under init=scaled); a setting outside it is a sensitivity check, shown with its label (\"reverses\" "
        "where its whole interval lies across the threshold from the deciding estimate, else its verdict) and never "
        "changing the verdict; with no setting in the band the verdict is inconclusive (no setting in the practice "
        "band)"),
    "the deciding comparison": (
        "the pre-registered comparison decides: each side at the lr with the lowest median tuning loss, judged on "
        "fresh seeds, in the base setting: the in-band init nearest the band's centre (0.89) with no qk-norm or "
        "z-loss, then the most common such setting, the shorter training on a tie"),
    "the lr choice": (
        "counted once: where both sides were judged at their chosen lr's neighbours (×√2, ÷√2), the interval is a "
        "nested bootstrap that chooses each lr again on resampled tuning seeds, and b − a at each pair of judged lrs "
        "is shown (one in another region of the outcome table is labelled lr-sensitive, not a veto); none where over "
        "2.5% of resamples choose lrs without a judged contrast (a seed diverged there on one side: its survivors "
        "never stand in for it); without one, the tuning seeds' "
        "paired differences at both chosen lrs must keep its region (below +m where it is contradicted, else its "
        "sign), else inconclusive (lr-dependent)"),
    "the outcome table": (
        "for \"A beats B\" on Δ = loss(B) − loss(A) with the claim's margin m: a 95% CI whose upper end lies below "
        "+m contradicts it (no gain as large as m at this scale: equivalent within ±m where it lies inside (−m, +m), "
        "DESIGN §9, whether or not it contains 0); otherwise one above 0 supports it (its lower end below +m: a gain, "
        "its relevance not shown), and one that contains 0 is inconclusive"),
    "the robustness rules": (
        "(claims.robust) every in-band init, 4× the tokens and a second size must give the same verdict, else "
        "inconclusive (init-dependent, early-training, size-dependent); an init or length no run varied in the band "
        "leaves the claim inconclusive (init or length unchecked), its reading stated beside it; the size check "
        "compares matched training tokens where such runs exist (else labelled size confounded with tokens); labels: "
        "optimum not bracketed, plateau-edge, reduced grid, an effect that halves at 4× (early-training); a part "
        "read off one setting (C5, C6) is read again in the same cells"),
    "the divergence rule": (
        "a diverged run is a failure, never dropped: if, over the seeds both sides ran, a seed diverged on one side "
        "only, the comparison is inconclusive (\"x diverged on k of n seeds, y on j\") unless Fisher's exact test "
        "finds the divergence rates different (p < 0.05), and then the side that diverged less wins"),
    "Holm": "a part's decision stands only if it survives Holm's step-down procedure over the claim's parts "
            "(family α = 0.05)",
}
_DIVERGED = "the divergence rule"
_HOLM = "Holm over the claim's parts"
_DECIDES = "the deciding comparison"
_ROBUST = "the robustness rules"

CLAIMS: tuple[Claim, ...] = (
    Claim(
        id="C1",
        statement="d_ff = 4·d_model is the sweet spot: 2× limits the FFN's capacity, while 8× adds parameters for "
                  "diminishing returns.",
        source="docs/claims.md §C1 (articles 001 §3.4.4, 002 §6.1, 000 common misconceptions)",
        kind="trained", experiment="widths",
        needs="ungated relu and gelu at width ratios 2, 4 and 8 at one fixed non-embedding budget "
              "(model.non_embedding_params, d_model solved per ratio); the fixed-d_model arm is described",
        rule=f"decided only at a fixed non-embedding budget, per activation, paired by seed: Δ₂ = loss(2×) − loss(4×) "
             f"and Δ₈ = loss(8×) − loss(4×), each by the outcome table ({margin('C1')}); supported if 4× beats both "
             f"neighbours for every activation, contradicted if against a neighbour 4× shows no gain as large as the "
             f"margin, "
             f"inconclusive otherwise; decided in the series of each width at its tuned lr in the reference setting "
             f"(in the practice band, no qk-norm or z-loss) closest to the base setting, the shorter training first; "
             f"the other series are shown and checked against it; {_HOLM}; {_DIVERGED}; {_ROBUST}. The fixed-d_model "
             "arm (loss per doubling of the width) is reported and does not decide: returns that diminish hold for "
             "any power law L = c + a·r^(−α), at 2× as at 4×",
        why="A sweet spot is a ratio that beats its neighbours when the parameters it spends are not free: at a "
            "fixed budget a wider FFN costs d_model, so 4× must give a lower loss than both 2× and 8×.",
        evaluate=c1,
    ),
    Claim(
        id="C2",
        statement="A SwiGLU FFN at d_ff = 8/3·d_model has the parameters of a 4× ungated FFN (3·d·8/3·d = 8d²), and "
                  "LLaMA-7B's 11008 is 2/3·4·4096 = 10922.67 rounded up to a multiple of 256.",
        source="docs/claims.md §C2 (articles 001 §3.4.4, 002 §3.4 and §6.2, 004 §8)",
        kind="analytic",
        needs="none (exact counts from ffnbench.model.ffn.size_ffn); lists the budget match of trained gated runs",
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
             f"inconclusive), paired by seed, each at its best lr when both ran an lr grid; {_DECIDES}; {_BETTER} "
             f"({margin('C3')}); "
             f"{_DIVERGED}; {_ROBUST}; the lr protocol and the sign of Δ at the checkpoints of the second half of "
             "training are shown",
        why="The gate's extra expressiveness must show up as lower loss when both FFNs hold the same number of "
            "parameters; otherwise SwiGLU only wins by being bigger.",
        evaluate=c3,
    ),
    Claim(
        id="C4",
        statement="GELU trains better and more stably than ReLU.",
        source="docs/claims.md §C4 (articles 002 §3.2, 003 §3)",
        kind="trained", experiment="activations",
        needs="relu and gelu at a matched budget; an lr grid (`make sweep EXP=sparsity`) for the stability part",
        rule=f"Δ = loss(relu) − loss(gelu) at a matched budget, paired by seed, each at its best lr when both ran an "
             f"lr grid (an lr where half or more of the seeds diverged is never a best lr); {_DECIDES}; "
             f"{_BETTER} ({margin('C4')}); {_DIVERGED}; {_ROBUST}. Stability (lr grid only): diverged runs over the "
             "grid as rates, "
             "Fisher's exact test: supported if GELU's rate is significantly lower (p < 0.05), contradicted if "
             "significantly higher, inconclusive otherwise (no divergence on either side leaves stability untested); "
             f"{_HOLM}",
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
        rule=f"two readings, each a part with its own verdict, and both must hold: at init (the article's snippet: "
             f"random weights; one value per seed, off one network's runs at any lr and length: the textbook network "
             f"(a 4× budget, no bias, no rounding) first, then the network closest to the base setting's, then the "
             f"most seeds; never a pool of networks) and after training (each activation in the sweep's "
             f"base setting, and gelu under another init in the base setting with only the init changed, where it "
             f"ran there, else in the matched setting closest to it, the textbook network first (a 4× budget, no "
             f"bias), then the most runs; at its best lr; one value per seed). In each, relu's zero fraction: "
             f"supported if its "
             f"95% CI lies within [{HALF_BAND[0]:g}, {HALF_BAND[1]:g}], contradicted if it lies wholly outside "
             f"[{HALF_OUTER[0]:g}, {HALF_OUTER[1]:g}]; and gelu has no hard zeros: supported if every seed's zero "
             f"fraction is ≤ {GELU_ZERO_TOL:g}, contradicted if every seed's is above it, inconclusive if they "
             f"disagree; gelu after training is a part per init in the practice band it trained under (one outside "
             f"the band is shown beside them); {_HOLM}; after training, {_ROBUST}",
        why="A symmetric pre-activation is negative half the time, and max(0, x) maps every negative to exactly 0, "
            "which is why ReLU is at 0.5 at init by construction; what a reader takes from the claim is the trained "
            "network, where training moves the pre-activations. x·Φ(x) is 0 only at x = 0 in exact arithmetic; an "
            "exact fp32 zero of PyTorch's GELU is a dtype artefact (erf rounds to −1 below x ≈ −5.5, where "
            "|x·Φ(x)| < 2e-7), "
            "so GELU's count reads the dtype-free fraction of pre-activations below −5.5 (units effectively off), "
            "hence a tolerance.",
        evaluate=c5,
    ),
    Claim(
        id="C6",
        statement="At large learning rates many ReLU units die (zero on every input); 40%+ dead units are reported.",
        source="docs/claims.md §C6 (article 002 §3.1)",
        kind="trained", experiment="sparsity",
        needs="relu (and other variants for comparison) at ≥ 2 learning rates, same setting otherwise",
        rule=f"dead fraction = units whose output is exactly 0 on every validation token after training, per seed; "
             f"judged over relu's lr grid in its deciding setting (tuning and judged runs alike), each lr with its own "
             f"95% interval; the lrs that count are those above relu's tuned lr at which every seed finished (where "
             f"some diverged, the survivors are a selected sample: shown, not judged); supported if at some counted lr "
             f"the CI is ≥ {DEAD_REPORTED:g} (Holm over the counted lrs), contradicted if at every counted lr it lies "
             f"below {DEAD_REPORTED:g}, inconclusive otherwise (and with no counted lr, or one seed); needs ≥ 2 lrs; "
             f"{_ROBUST} (its lr grid is its lr check)",
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
        rule=f"non-inferiority per activation, in bits per byte (tokenizer-independent): Δ = bpb(no bias) − "
             f"bpb(bias), paired by seed; supported if the 95% interval's upper bound is below the margin "
             f"{BIAS_MARGIN_BPB:g} bpb (0.01 nats/token at the byte tokenizer, rounded up, and above the 0.013 bpb "
             f"cross-machine spread), contradicted if its lower bound is above it, inconclusive otherwise; the "
             f"interval is a hierarchical bootstrap over seeds and validation windows where the runs recorded "
             f"per-window losses, else the t interval over seeds (said so), and the nested one in bpb where neighbour "
             f"runs exist; every activation must hold; {_HOLM}; "
             f"{_DECIDES}; {_DIVERGED}; {_ROBUST}; tokens/s shown with and without",
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
        rule=f"Δ = loss(relu) − loss(swish) at each depth ({_BETTER}, {margin('C8')}; {_DECIDES}, at that depth; "
             f"{_ROBUST}); and the "
             "depth interaction "
             f"Δ(deep) − Δ(shallow), paired by seed, in the base setting ({_BETTER} with C8's margin at the deep "
             "side's loss: a flat interaction is contradicted; inconclusive when either depth's comparison differs in "
             "divergences), read again "
             "under the other init, at 4× the tokens and at a second size like a part read off one setting "
             "(where the depths of the base pair trained matched tokens, a cell's pair must too: one whose depths "
             "trained unequal tokens is shown, not deciding, its factor unchecked; "
             f"{_ROBUST}; its lr counted once: where every side was judged at its chosen lr's neighbours, the "
             "interval is the nested bootstrap that chooses all four lrs again on resampled tuning seeds, and a pair "
             "of judged lrs in another region of the outcome table is labelled lr-sensitive, not a veto; lr "
             f"unchecked without neighbour runs); {_DIVERGED}; "
             f"every part must hold, {_HOLM}",
        why="A smoother activation should help optimisation, and more so as depth makes optimisation harder.",
        evaluate=c8,
    ),
    Claim(
        id="C9",
        statement="Rounding d_ff up to a multiple of 64/128/256 makes the FFN run faster on tensor cores.",
        source="docs/claims.md §C9 (articles 002 §6.2, 004 §8.2)",
        kind="benchmark",
        needs=f"{BENCH_GLOB} from `make bench` (FFN timings at d_ff 682, unaligned, and 640 / 704 / 768, aligned)",
        rule="GPU only, two parts around the unaligned 682, the noise being each row's median ± IQR/2 over the "
             "benchmark's repetitions: (1) the aligned 704 takes no more absolute time than 682 although larger — "
             "supported if 704's band lies at or below 682's, contradicted if it lies above, inconclusive if they "
             "overlap; (2) the aligned 640 costs no more time per parameter than 682 although smaller — the same "
             "rule on ns/param; both must hold. A file without the 640 row (older benchmarks) is inconclusive (rerun "
             "`make bench`); CPU-only data is inconclusive (no tensor cores)",
        why="Aligned shapes tile exactly onto tensor-core fragments. Larger GEMMs are cheaper per parameter whether "
            "aligned or not, so comparing 682 with larger aligned sizes alone favours the claim: alignment must "
            "show where size works against it — a larger aligned FFN no slower, a smaller one no dearer per "
            "parameter.",
        evaluate=c9,
    ),
    Claim(
        id="C10",
        statement="The FFN holds about 2/3 of a block's parameters (BERT-base: FFN 4.7M vs attention 2.4M).",
        source="docs/claims.md §C10 (articles 002 introduction, 000 example 1)",
        kind="analytic",
        needs="none (ffnbench.model.accounting.count_params on BERT-base, GPT-2 small, LLaMA-7B)",
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
        needs="none (the formula, ffnbench.model.accounting, and torch's FlopCounterMode on a BERT-base FeedForward)",
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
        needs="none (ffnbench.model.accounting.count_params on the reference models)",
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
        rule=f"analytic: a `linear` FeedForward must equal one composed affine map (relative error < 1e-9); trained "
             f"(both needed, a missing one is inconclusive): Δ = loss(linear) − loss(gelu) and loss(linear) − "
             f"loss(swiglu), paired by seed; {_DECIDES}; {_BETTER} ({margin('C13')}); {_DIVERGED}; {_ROBUST}; every "
             f"part must hold, "
             f"{_HOLM} (the analytic part is exact and not corrected)",
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
    obs = Observations.of(runs, files)
    return [evaluate_claim(c, obs) for c in CLAIMS]
