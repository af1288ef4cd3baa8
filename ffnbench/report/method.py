"""REPORT.md's "Method" section: how every verdict was reached — each claim's rule (from the registry), the
noise model, the lr protocol that decided each verdict, the multiplicity policy, what is too small to be a
finding, and how far the runs' training length is from compute-optimal."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from ffnbench.claims import ClaimResult, Run
from ffnbench.claims.pairing import CROSS_MACHINE_NATS
from ffnbench.claims.registry import SHARED_RULES
from ffnbench.stats.multiplicity import MULTIPLICITY

COMPUTE_OPTIMAL_TOKENS_PER_PARAM = 20  # Hoffmann et al. 2022 ("Chinchilla"): about 20 training tokens per parameter
LR_PROTOCOL = "lr protocol: "  # how a claim's evidence lines record the lr protocol of a comparison
DECIDES = "← decides the verdict"  # how they mark the comparison that decided


def lr_protocols(details: Iterable[str]) -> list[str]:
    """The lr protocols a claim's evidence records: those of the comparisons marked as deciding (their
    indented sub-items), or every one recorded when none is marked; in order, once each."""
    lines = list(details)
    deciding = [i for i, line in enumerate(lines) if DECIDES in line]
    picked = []
    for i in deciding:
        for sub in lines[i + 1:]:
            if not sub.startswith("  "):
                break
            picked.append(sub)
    found = [line.split(LR_PROTOCOL, 1)[1].strip() for line in (picked if deciding else lines) if LR_PROTOCOL in line]
    return list(dict.fromkeys(found))


def tokens_per_param(runs: Iterable[Run]) -> list[float]:
    """Training tokens per parameter (all parameters, embeddings included) of each run that records both."""
    out = []
    for r in runs:
        tokens = r.result.tokens
        if tokens and r.total_params:
            out.append(tokens / r.total_params)
    return out


def grids_line(runs: Iterable[Run]) -> str:
    """The tuning grids as they ran, per setting: how many lrs and tuning seeds (the fewest at any lr), and how many
    judged seeds each variant had — the protocol each arm actually used, whatever the preset asked."""
    from ffnbench.claims.runs import describe_setting, group_by

    runs = list(runs)
    tuning = [r for r in runs if r.role == "tuning"]
    if not tuning:
        return "- **Grids as run:** no tuning runs (every lr fixed by the preset)."
    parts = []
    for setting, rs in group_by(tuning, lambda r: r.setting).items():
        shapes = []
        for label, vs in group_by(rs, lambda r: r.label).items():
            lrs = sorted({r.lr for r in vs})
            seeds = min(len({r.seed for r in vs if r.lr == lr}) for lr in lrs)
            judged = len({r.seed for r in runs if r.role == "judged" and r.setting == setting and r.label == label})
            near = any(r.role == "neighbour" and r.setting == setting and r.label == label for r in runs)
            shapes.append(f"{label} {len(lrs)} × {seeds}, {judged} judged" + (" (+ neighbours)" if near else ""))
        parts.append(f"{describe_setting(setting)}: " + "; ".join(shapes))
    return ("- **Grids as run** (lrs × tuning seeds at every lr, judged seeds; a grid under 7 × 3 is a *reduced grid* "
            "and its verdicts say so): " + " · ".join(parts) + ".")


def training_length_line(runs: Iterable[Run]) -> str:
    """Tokens per parameter of the runs against the compute-optimal ~20, and how far short they are."""
    ratios = tokens_per_param(runs)
    if not ratios:
        return "- **Training length:** no run records its tokens and parameters."
    mid, low, high = statistics.median(ratios), min(ratios), max(ratios)
    spread = f"{mid:.2g}" if low == high else f"median {mid:.2g} (range {low:.2g}–{high:.2g})"
    target = COMPUTE_OPTIMAL_TOKENS_PER_PARAM
    verdict = (f"{target / mid:.0f}× short of it" if mid < target else "at or beyond it")
    return (f"- **Training length:** the runs trained {spread} tokens per parameter (all parameters), against the "
            f"~{target} of compute-optimal training (Hoffmann et al. 2022): {verdict}. Rankings of FFN variants can "
            "change with training length, so the trained verdicts hold for runs this short; each deciding "
            "comparison says whether its sign holds along the second half of the validation curve.")


def noise_line(runs: list[Run]) -> str:
    """The noise model, and how many runs recorded the per-window validation losses it needs."""
    with_windows = sum(bool(r.result.val_windows) for r in runs)
    windows = (f"{with_windows} of the {len(runs)} runs here recorded them" if runs else "no runs here")
    return ("- **Noise model:** seed-to-seed variance — comparisons are paired by seed (the same seed gives every FFN "
            "the same data order and non-FFN initialisation), intervals are two-sided 95% Student-t over the per-seed "
            "values (Welch where no seed is shared); fewer than two seeds, or the same value at every seed, give no "
            "interval and at most *inconclusive*. Validation-set noise — the validation set is one fixed sample; "
            "where both runs of every paired seed recorded their final validation loss per window, a comparison's "
            "interval is a hierarchical bootstrap over seeds and validation windows (`stats.hierarchical_bootstrap`, "
            f"never narrower than the t interval over seeds), and each comparison says which interval it used "
            f"({windows}); elsewhere the intervals cover seed-to-seed variation only.")


def robustness_line(results: list[ClaimResult]) -> str:
    """Per trained claim, the robustness labels its deciding comparisons earned and the checks that could not be
    made (claims.robust), as its evidence records them."""
    parts = []
    for r in results:
        if r.claim.kind != "trained":
            continue
        found = [line.split("robustness: ", 1)[1] for line in r.details if "robustness: " in line]
        none = "not applicable (no tuned, fresh-seed comparison)"
        parts.append(f"{r.claim.id}: {' | '.join(found) if found else none}")
    return ("- **Robustness (claims.robust: lr, init, training length, bracketing; labels per deciding comparison):** "
            + ("; ".join(parts) or "no trained claim") + ".")


def instability_line(runs: list[Run]) -> str:
    from ffnbench.runs.instability import Thresholds

    thresholds = {Thresholds.from_config((r.result.config or {}).get("instability")) for r in runs} or {Thresholds()}
    return ("- **Instabilities** (recorded per run, outcomes of their variant at their lr, never dropped): "
            + "; ".join(t.describe() for t in sorted(thresholds, key=repr)) + ".")


def method_section(results: list[ClaimResult], runs: list[Run]) -> list[str]:
    """The Method section's markdown lines: one rule a bullet (docs/claims.md holds them at length). The protocol as
    it ran (each verdict's lr protocol, the grids, every deciding comparison's labels) is protocol_section's."""
    del results  # the Method is the rules: what each verdict read is in its claim's section and the protocol's
    lines = ["## Method", "",
             "- **Verdicts:** *supported*, *contradicted* or *inconclusive*, from each claim's rule (in its section); "
             "a claim made of parts is their conjunction.",
             "- **Noise:** comparisons are paired by seed; 95% intervals are Student-t over seeds, or a bootstrap over "
             "seeds and validation windows where the runs recorded per-window losses (each comparison says which).",
             f"- **Multiplicity:** {MULTIPLICITY} (the parts that carry a p-value).",
             "- **lr tuning:** the lr with the lowest median final loss over tuning seeds that are never judged, a "
             "diverged seed counting as +∞; a grid whose choice sits at its edge is extended first.",
             instability_line(runs),
             f"- **Reproducibility:** bit for bit on one machine; a difference under the cross-machine spread "
             f"({CROSS_MACHINE_NATS:g} nats) is not a finding.",
             training_length_line(runs)]
    lines += [f"- **{name}:** {text}." for name, text in SHARED_RULES.items()]
    return [*lines, ""]


def protocol_section(results: list[ClaimResult], runs: list[Run]) -> list[str]:
    """## Protocol as run: each verdict's lr protocol, the grids as they ran, and the robustness labels of every
    deciding comparison (the numbers behind the Method's rules)."""
    protocols = []
    for r in results:
        if r.claim.kind == "trained":
            found = lr_protocols(r.details)
            protocols.append(f"{r.claim.id}: {'; '.join(found) if found else 'no lr protocol recorded'}")
    return ["## Protocol as run", "",
            "- **Learning rate (protocol per verdict):** " + ("; ".join(protocols) or "no trained claim") + ".",
            grids_line(runs), noise_line(runs), robustness_line(results), ""]
