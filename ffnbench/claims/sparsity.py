"""C5, C6: hard zeros and dead units in the FFN's hidden activations (docs/claims.md §C5, §C6)."""

from __future__ import annotations

from ffnbench import stats
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_ci, fmt_interval, fmt_mean_std
from ffnbench.claims.pairing import PairKey, matched_key
from ffnbench.claims.runs import group_by, per_seed_mean, stat_of
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

DEAD_REPORTED = 0.4  # C6: "40%+ of ReLU units dead"


def c5(obs: Observations) -> Evidence:
    ev = Evidence()
    zero_at_init = stat_of("init", "zero_frac")
    measured = [r for r in obs.runs if r.status == "finished" and zero_at_init(r) is not None]
    if not {"relu", "gelu"} & {r.act for r in measured}:
        return ev
    relu = stats.summarize(per_seed_mean([r for r in measured if r.act == "relu"], zero_at_init).values())
    gelu = [r for r in measured if r.act == "gelu"]
    gelu_max = max((zero_at_init(r) for r in gelu), default=None)
    half = "relu zeroes about half at init"
    ev.parts.append((half, stats.verdict_within(relu, (0.4, 0.6), (0.3, 0.7)) if relu.n
                     else Verdict(INCONCLUSIVE, "no relu runs in this sweep")))
    no_zeros = "gelu has no hard zeros at init"
    ev.parts.append((no_zeros, Verdict(SUPPORTED if gelu_max == 0 else CONTRADICTED,
                                       f"largest zero fraction of a gelu run at init: {gelu_max:.3g}") if gelu
                     else Verdict(INCONCLUSIVE, "no gelu runs in this sweep")))
    ev.n = min_n(relu.n or None, len({r.seed for r in gelu}) or None)
    ev.effect = (f"relu zero fraction at init {fmt_interval(relu, unit='', signed=False)}; "
                 f"largest gelu zero fraction at init {'n/a' if gelu_max is None else f'{gelu_max:.3g}'}")
    ev.details = ["| variant | seeds | zero fraction at init (mean ± std) | 95% CI | after training (mean ± std) "
                  "| dead units after training |", "|---|---|---|---|---|---|"]
    for act in sorted({r.act for r in measured}):
        runs = [r for r in measured if r.act == act]
        init, final, dead = (stats.summarize(per_seed_mean(runs, stat_of(when, key)).values())
                             for when, key in (("init", "zero_frac"), ("final", "zero_frac"), ("final", "dead_frac")))
        ev.details.append(f"| {act} | {init.n} | {fmt_mean_std(init, 3)} | {fmt_ci(init, 3)} "
                          f"| {fmt_mean_std(final, 3)} | {fmt_mean_std(dead, 3)} |")
    return ev


def c6(obs: Observations) -> Evidence:
    ev = Evidence()
    relu = [r for r in obs.runs if r.act == "relu"]
    if not relu:
        return ev
    groups = group_by(relu, matched_key)
    key = min(groups, key=lambda k: (-len({r.lr for r in groups[k]}), -len(groups[k]), repr(k)))
    lrs = sorted({r.lr for r in groups[key]})
    ev.details = _sparsity_table(obs, key)
    if len(lrs) < 2:
        ev.n = len({r.seed for r in relu})
        ev.parts.append(("dead relu units at the largest lr",
                         Verdict(INCONCLUSIVE, "needs ≥ 2 learning rates: run `make sweep EXP=sparsity`")))
        return ev
    dead = stat_of("final", "dead_frac")
    measured = [lr for lr in lrs if per_seed_mean([r for r in groups[key] if r.lr == lr], dead)]
    if not measured:
        ev.n = 0
        ev.parts.append(("dead relu units at the largest lr", Verdict(INCONCLUSIVE, "no finished relu run")))
        return ev
    top = measured[-1]
    s = stats.summarize(per_seed_mean([r for r in groups[key] if r.lr == top], dead).values())
    note = "" if top == lrs[-1] else f" (every run at lr {lrs[-1]:g} diverged)"
    ev.parts.append((f"relu dead fraction at lr {top:g} ≥ {DEAD_REPORTED:g}", stats.verdict_at_least(s, DEAD_REPORTED)))
    ev.n = s.n
    ev.effect = f"relu dead fraction at lr {top:g}{note}: {fmt_interval(s, unit='', signed=False)}"
    return ev


def _sparsity_table(obs: Observations, key: PairKey) -> list[str]:
    lines = [f"In {key.describe()}:", "",
             "| variant | lr | finished | diverged | dead units (mean ± std) | never positive | zero fraction |",
             "|---|---|---|---|---|---|---|"]
    runs = [r for r in obs.runs if matched_key(r) == key]
    for act in sorted({r.act for r in runs}):
        for lr in sorted({r.lr for r in runs if r.act == act}):
            at = [r for r in runs if r.act == act and r.lr == lr]
            cells = [stats.summarize(per_seed_mean(at, stat_of("final", k)).values())
                     for k in ("dead_frac", "never_positive_frac", "zero_frac")]
            lines.append(f"| {act} | {lr:g} | {sum(r.status == 'finished' for r in at)} | "
                         f"{sum(r.status == 'diverged' for r in at)} | " + " | ".join(fmt_mean_std(c, 3) for c in cells)
                         + " |")
    return lines
