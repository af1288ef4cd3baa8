"""REPORT.md as markdown: a summary paragraph, the verdict per claim, the results tables per comparison with
paired differences and their power, the figures, the runs not used, and the provenance."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ffnbench.claims import (
    ClaimResult,
    Run,
    describe_setting,
    fmt_ci,
    fmt_mean_std,
    fmt_p,
    summary_of,
)
from ffnbench.claims.lr_protocol import NEIGHBOUR
from ffnbench.claims.pairing import paired_difference
from ffnbench.report.comparisons import comparisons, mean_of, reference_label
from ffnbench.report.costs import costs_section
from ffnbench.report.instabilities import instability_section
from ffnbench.report.layout import FIGURES_DIR, RESULTS_FILE
from ffnbench.report.load import Loaded, Unused, first_line
from ffnbench.report.lrgrid import lrgrid_section
from ffnbench.report.lrs import lr_section
from ffnbench.report.method import method_section, protocol_section
from ffnbench.report.regime import regime_section
from ffnbench.report.rows import HEADER, summary_row
from ffnbench.stats.intervals import Paired
from ffnbench.stats.power import SEEDS_CAP, minimal_detectable_effect, seeds_for_halfwidth, seeds_needed
from ffnbench.tables import fmt, markdown_table

RESOLVE_EFFECT = 0.01  # nats: the difference the "seeds needed" column is sized for
TARGET_HALFWIDTH = 0.02  # nats: the campaign's goal for a headline difference's 95% interval (± this)


# ---- the whole document -----------------------------------------------------------------------------------


def render(loaded: Loaded, results: list[ClaimResult], figures: list[tuple[str, str]], source_arg: str,
           out_dir: Path | None = None) -> str:
    """REPORT.md's text. `source_arg` is what rebuilds it; `out_dir`, where it is written (its results.jsonl
    rebuilds this copy)."""
    title = (loaded.manifest or {}).get("experiment") or (loaded.runs[0].result.config.get("name")
                                                          if loaded.runs else loaded.source.name)
    lines = [f"# ffnbench report: {title}", "", summary_paragraph(loaded, results), ""]
    lines += method_section(results, loaded.runs)
    lines += claims_section(results)
    lines += regime_section(loaded.runs)
    lines += protocol_section(results, loaded.runs)
    lines += lr_section(loaded.runs)
    lines += instability_section(loaded.runs)
    lines += lrgrid_section(loaded.runs)
    lines += results_section(loaded.runs)
    lines += costs_section(loaded.runs)
    lines += ["## Figures", ""]
    lines += [f"![{caption}]({FIGURES_DIR}/{name})\n\n*{caption}* (`{FIGURES_DIR}/{name}`)\n"
              for caption, name in figures]
    if not figures:
        lines += ["No figure: no run has the data one needs.", ""]
    lines += unused_section(loaded)
    lines += provenance_section(loaded, source_arg, out_dir)
    lines.append(f"*Generated {time.strftime('%Y-%m-%d %H:%M:%S %z')} by ffnbench.report.*")
    return "\n".join(lines) + "\n"


# ---- results by comparison --------------------------------------------------------------------------------


def variant_row(label: str, runs: list[Run]) -> list[Any]:
    """One row of a comparison's table (VARIANT_HEADER): a variant's sizes, loss and BPB over seeds, speed and
    activation statistics."""
    r0 = runs[0]
    loss, bpb = summary_of(runs), summary_of(runs, lambda r: r.bpb)
    used = [r for r in runs if r.usable]
    dead = mean_of((r.final or {}).get("dead_frac") for r in used)
    zero = mean_of((r.final or {}).get("zero_frac") for r in used)
    diverged = sum(r.diverged for r in runs)
    return [label + (f" ({diverged} diverged)" if diverged else ""), r0.d_model, r0.d_ff, f"{r0.ffn_params:,}",
            f"{r0.total_params:,}", fmt_mean_std(loss), fmt_ci(loss), fmt_mean_std(bpb, 3), fmt_ci(bpb, 3), loss.n,
            fmt(mean_of(r.tokens_per_s for r in used), ",.0f"), fmt(mean_of(r.mfu for r in used), ".1%"),
            fmt(zero, ".3f"), fmt(dead, ".3f")]


VARIANT_HEADER = ["variant", "d_model", "d_ff", "FFN params/layer", "total params", "val loss (nats, mean ± std)",
                  "95% CI", "BPB (mean ± std)", "BPB 95% CI", "n", "tokens/s", "MFU", "zero fraction", "dead units"]
PAIRED_HEADER = ["variant", "Δ loss (nats)", "95% CI", "± (half-width)", "p", "n", "SD of Δ", "MDE", "seeds for 0.01",
                 f"seeds for ±{TARGET_HALFWIDTH:g}"]


def paired_rows(variants: dict[str, list[Run]], ref: str) -> tuple[list[list[Any]], list[Paired]]:
    """Each variant against the reference, paired by seed with the claims' noise model (pairing.paired_difference:
    the seed × validation-window bootstrap where recorded; Welch where no seed is shared): rows and differences."""
    rows, diffs = [], []
    for label, runs in variants.items():
        if label == ref:
            continue
        d, _ = paired_difference(variants[ref], runs)
        diffs.append(d)
        seeded = d.std is not None and d.method != "welch"
        mde = minimal_detectable_effect(d.std, d.n) if seeded else None
        need = seeds_needed(d.std, RESOLVE_EFFECT) if seeded else None
        narrow = seeds_for_halfwidth(d.std, TARGET_HALFWIDTH) if seeded else None
        rows.append([label, fmt(d.mean, "+.4f"), fmt_ci(d, signed=True),
                     fmt((d.ci_high - d.ci_low) / 2 if d.has_ci else None, ".4f"),
                     fmt_p(d.p_value), f"{d.n}{' (Welch)' if d.method == 'welch' else ''}",
                     fmt(d.std, ".4f"), fmt(mde, ".4f"), need if need is not None else "n/a",
                     narrow if narrow is not None else "n/a"])
    return rows, diffs


def power_line(diffs: list[Paired]) -> str:
    """The seed-to-seed noise of paired differences in this comparison, and what it lets us resolve."""
    usable = [d for d in diffs if d.method != "welch" and d.std is not None and d.n >= 2]
    if not usable:
        return ("Minimal detectable effect: n/a (fewer than 2 shared seeds; the seed variance is unknown). "
                "Run more seeds to size the effects this sweep can resolve.")
    dof = sum(d.n - 1 for d in usable)
    sd = math.sqrt(sum((d.n - 1) * d.std**2 for d in usable) / dof)  # pooled over the comparisons
    n = min(d.n for d in usable)
    mde = minimal_detectable_effect(sd, n)
    need = seeds_needed(sd, RESOLVE_EFFECT)
    return (f"Minimal detectable effect (paired t-test, α = 0.05, power 0.8) at the pooled SD of the per-seed "
            f"differences, {sd:.4f} nats, with n = {n} seeds: **{mde:.4f} nats**. Seeds needed to resolve "
            f"{RESOLVE_EFFECT:g} nats: **{need}**" + (f" (capped at {SEEDS_CAP})" if need.capped else "") + ".")


def setting_title(setting: tuple, lr: float | None) -> str:
    """A comparison's heading: its model setting and learning rate (None: each variant at its tuned lr)."""
    return f"{describe_setting(setting)}, " + (f"lr {lr:g}" if lr is not None else
                                                "each variant at the lr its tuning runs chose (see Learning rates)")


def results_section(runs: list[Run]) -> list[str]:
    """Per comparison: the variants' table, then their paired differences from the reference and their power."""
    lines = ["## Results by comparison", "",
             "Final validation loss in nats/token, bits per byte (BPB) alongside; mean ± sample std over seeds, "
             "95% t-interval of the mean, n seeds. Throughput, MFU and activation statistics are means over "
             "the finished runs (zero fraction and dead units: after training, on the validation set).", ""]
    if not runs:
        return [*lines, "No usable runs.", ""]
    for setting, lr, variants in comparisons(runs):
        lines += [f"### {setting_title(setting, lr)}", ""]
        lines += markdown_table(VARIANT_HEADER, (variant_row(label if lr is not None else f"{label} (lr {rs[0].lr:g})",
                                                             rs) for label, rs in variants.items()))
        if len(variants) > 1:
            ref = reference_label(variants)
            rows, diffs = paired_rows(variants, ref)
            lines += ["", f"Paired differences vs **{ref}** (variant − {ref}, by seed; Welch where no seeds are "
                          "shared; negative = lower loss than the reference). The 95% CI and its half-width carry "
                          "the claims' noise model (the seed × validation-window bootstrap where the runs recorded "
                          "per-window losses); the SD, MDE and seeds-needed columns, \"seeds for "
                          f"±{TARGET_HALFWIDTH:g}\" included, use the seed-to-seed SD of the differences only (a t "
                          "interval over seeds): under the bootstrap the validation-window part of the interval "
                          "does not shrink with more seeds, so more seeds than these may be needed:", ""]
            lines += markdown_table(PAIRED_HEADER, rows)
            lines += ["", power_line(diffs)]
        lines.append("")
    return lines


# ---- the claims section -----------------------------------------------------------------------------------


def claims_section(results: list[ClaimResult]) -> list[str]:
    """The verdict table, then per claim its statement, source, verdict, effect, rule, numbers and command."""
    lines = ["## Claims", "",
             "One row per claim: its verdict (and what undecided it), the deciding effect with its 95% interval "
             "(nats/token of final validation loss unless it names bpb or is a fraction), the setting it was decided "
             "in, and its two most telling labels. Each claim's section below holds the rule, every setting's reading "
             "and every label.", ""]
    lines += markdown_table(HEADER, (summary_row(r) for r in results))
    for r in results:
        c = r.claim
        lines += ["", f"### {c.id}: {c.statement}", "",
                  f"*Source:* {c.source} · *kind:* {c.kind} · *runs:* {c.needs}", "",
                  f"**Verdict: {r.verdict.verdict}** — {r.verdict.reason}", ""]
        if _scoped(r) != "–":
            lines += [f"**Where it ran:** {_scoped(r)}", ""]
        if len(r.parts) > 1:  # each part's own verdict (after the multiplicity correction), then the conjunction
            lines += ["**Parts:**", "", *(f"- {label}: *{v.verdict}* — {v.reason}" for label, v in r.parts), ""]
        lines += [f"**Effect:** {r.effect or 'n/a'}" + ("" if r.n is None else f" (n = {r.n} seeds)"), "",
                  f"**Rule:** {c.rule}.", "", f"**Why:** {c.why}", ""]
        if r.details:
            lines += ["**Numbers:**", "", *r.details, ""]
        lines.append(f"**Reproduce:** `{c.command}`" + ("" if c.kind != "trained" else " then `make report`"))
    return [*lines, ""]


def _scoped(r: ClaimResult) -> str:
    """The reading where the runs ran, when unchecked factors keep it from being the claim's verdict."""
    if r.scoped is None or r.scoped.verdict == r.verdict.verdict or not r.unchecked:
        return "–"
    return f"{r.scoped.verdict} ({', '.join(r.unchecked)} unchecked)"


# ---- provenance and summary -------------------------------------------------------------------------------


def _distinct(values: Iterable[Any]) -> str:
    """The distinct values, with run counts when they differ; "unknown" when there is none."""
    counts = Counter(v for v in values if v not in (None, "", {}))
    return "; ".join(f"{v} ({n} runs)" if len(counts) > 1 else str(v) for v, n in counts.most_common()) or "unknown"


def _machine(h: dict) -> str:
    """A run's hardware block in one line: accelerator · GPU or CPU model · devices · precision."""
    parts = (h.get("accelerator"), h.get("gpu") or h.get("cpu"), f"{h.get('devices', 1)} device(s)", h.get("precision"))
    return " · ".join(str(x) for x in parts if x)


def provenance_section(loaded: Loaded, source_arg: str, out_dir: Path | None = None) -> list[str]:
    """How to rebuild the report and rerun the sweep, and what the runs ran on: commits, versions, hardware, totals."""
    recs = [r.result for r in loaded.runs]
    git = _distinct(f"{(g := rec.git or {}).get('revision') or 'unknown'}"
                    + (" (uncommitted changes)" if g.get("dirty") else "") for rec in recs)
    packages = sorted({k for rec in recs for k in (rec.versions or {})})
    versions = ", ".join(f"{p} {_distinct((rec.versions or {}).get(p) for rec in recs)}" for p in packages)
    hardware = _distinct(_machine(rec.hardware) for rec in recs if rec.hardware)
    tokens = sum(rec.tokens or 0 for rec in recs)
    flops = sum((rec.flops or {}).get("total_training") or 0 for rec in recs)
    wall = sum(rec.wall_time_s or 0 for rec in recs)
    m = loaded.manifest or {}
    lines = ["## Provenance", "",
             f"- source: `{loaded.source}`; rebuild this report with `python -m ffnbench.report {source_arg}`"
             + (f"; this copy rebuilds from its own results with `python -m ffnbench.report "
                f"{out_dir / RESULTS_FILE}`" if out_dir is not None and out_dir / RESULTS_FILE != Path(source_arg)
                else ""),
             f"- sweep: experiment `{m.get('experiment', 'unknown')}`, command `{m.get('command', 'unknown')}`, "
             f"started {m.get('started_at', 'unknown')}" if m else "- sweep: no sweep.json (command unknown)"]
    if m.get("train_command"):
        train = str(m["train_command"])
        lines.append(f"- training command: `{'python ' + train if train.startswith('-m ') else train}`")
    lines += [f"- git commit(s): {git}", f"- package versions: {versions or 'unknown'}", f"- hardware: {hardware}",
              f"- totals over the {len(recs)} runs used (finished and diverged): {tokens:,} training tokens, "
              f"{flops:.3g} training FLOPs (analytic: 6·N plus attention, per token), {wall:,.0f} s "
              f"({wall / 3600:.2f} h) of training wall time", ""]
    return lines


def unused_section(loaded: Loaded) -> list[str]:
    """Every run the statistics leave out, diverged ones included, with the reason. A diverged judged run counts
    as a failure in the claims' comparisons; a diverged tuning run only ranks its lr last (Learning rates)."""
    def reason(r: Run) -> str:
        what = (f"diverged: {first_line(r.error)}" if r.status == "diverged"
                else "diverged: finished without a finite validation loss")
        if r.role == "tuning":
            return (f"{what} — an lr-tuning run: judged by no statistic; its lr ranks last when the variant's lr "
                    "is chosen (Learning rates); kept in results.jsonl")
        return (f"{what} — excluded from the loss statistics, counted as a failure by the comparisons' divergence "
                "rule and in the stability checks (C4), and kept in results.jsonl")

    diverged = [Unused(r.name, r.status, reason(r)) for r in loaded.runs if r.diverged]
    rows = sorted([*loaded.unused, *diverged], key=lambda u: u.run)
    lines = ["## Runs not used", ""]
    if not rows:
        return [*lines, "None: every run of the sweep finished and is in the statistics.", ""]
    return [*lines, *markdown_table(["run", "status", "reason"], ([u.run, u.status, u.reason] for u in rows)), ""]


def summary_paragraph(loaded: Loaded, results: list[ClaimResult]) -> str:
    """The opening paragraph: which judged runs (the lr-tuning runs apart: they are judged by no statistic; the runs
    at the chosen lrs' neighbours apart: they widen the intervals), on what data, and the count of verdicts. Every
    run loaded is counted once: finished judged, diverged judged, tuning, neighbour, or not used."""
    usable = [r for r in loaded.runs if r.usable]
    if not usable:
        return (f"No usable runs in `{loaded.source}` ({len(loaded.unused)} not used, listed below). Only the "
                "analytic claims can be judged.")
    cfg = usable[0].result.config
    judged = [r for r in loaded.runs if r.role == "judged"]
    tuning = [r for r in loaded.runs if r.role == "tuning"]
    finished = [r for r in judged if r.usable]
    seeds = sorted({r.seed for r in finished})
    counts = Counter(r.verdict.verdict for r in results)
    tokens = sorted({r.result.tokens or 0 for r in usable})
    experiment = (loaded.manifest or {}).get("experiment", cfg.get("name"))
    seed_list = (f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}" if seeds else "no seed")
    tuning_seeds = sorted({r.seed for r in tuning})
    tuned = (f", plus {len(tuning)} lr-tuning run{'s' if len(tuning) > 1 else ''} on seed"
             f"{'s' if len(tuning_seeds) > 1 else ''} {', '.join(map(str, tuning_seeds))} "
             f"({sum(r.diverged for r in tuning)} diverged; they only choose each variant's lr, see Learning rates)"
             if tuning else "")
    neighbours = [r for r in loaded.runs if r.role == NEIGHBOUR]
    near = (f", plus {len(neighbours)} run{'s' if len(neighbours) > 1 else ''} of the judged seeds at the chosen lrs' "
            f"neighbours ({sum(r.diverged for r in neighbours)} diverged; they put the lr choice inside the intervals)"
            if neighbours else "")
    text = (f"{len(finished)} finished judged runs of {len({(r.label, r.setting, r.lr) for r in finished})} variants "
            f"({seed_list}){tuned}{near} from the `{experiment}` sweep "
            f"on {cfg['data'].get('source')} "
            f"({cfg['data'].get('tokenizer')} tokens), "
            f"{' / '.join(f'{t:,}' for t in tokens)} training tokens per run; "
            f"{sum(r.diverged for r in judged)} diverged judged runs and {len(loaded.unused)} other runs not used. "
            f"Of the {len(results)} claims, {counts['supported']} are supported, {counts['contradicted']} "
            f"contradicted and {counts['inconclusive']} inconclusive. Loss is the final validation loss in nats/token, "
            "with bits per byte alongside.")
    if len(seeds) < 2:
        text += (" **One seed only:** no confidence intervals (the CI columns say n/a), and no trained claim can be "
                 "more than inconclusive; rerun with more seeds (ARGS=\"seed=0,1,2\").")
    return text
