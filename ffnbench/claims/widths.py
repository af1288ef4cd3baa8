"""C1: d_ff = 4·d_model is the sweet spot of the width ratio (docs/claims.md §C1)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from ffnbench import stats
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_ci, fmt_interval, fmt_mean_std
from ffnbench.claims.runs import Run, Setting, by_seed, describe_setting, summary_of
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict


class Series(NamedTuple):
    """Ungated runs of one activation that differ only in their width ratio."""

    setting: Setting
    bias: bool
    multiple_of: int
    lr: float


def _width_series(runs: Iterable[Run], act: str, fixed_budget: bool) -> dict[Series, dict[float, list[Run]]]:
    """Ungated runs of one activation by series, then by width ratio."""
    series: dict[Series, dict[float, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.act == act and not r.gated and bool(r.factor("model.non_embedding_params")) == fixed_budget:
            series[Series(r.setting, r.bias, r.multiple_of, r.lr)][r.ratio].append(r)
    return series


def _series_table(act: str, ratios: dict[float, list[Run]]) -> list[str]:
    lines = [f"| {act}: d_ff/d_model | d_model | d_ff | FFN params/layer | n | val loss (mean ± std) | 95% CI "
             "| BPB |", "|---|---|---|---|---|---|---|---|"]
    for ratio in sorted(ratios):
        runs = ratios[ratio]
        s, bpb = summary_of(runs), summary_of(runs, lambda r: r.bpb)
        r0 = runs[0]
        lines.append(f"| {ratio:g} | {r0.d_model} | {r0.d_ff} | {r0.ffn_params:,} | {s.n} | {fmt_mean_std(s)} | "
                     f"{fmt_ci(s)} | {fmt_mean_std(bpb, 3)} |")
    return lines


def _fixed_d(act: str, ratios: dict[float, list[Run]], ev: Evidence) -> None:
    """At a fixed d_model: 2→4 must help, and help more than 4→8 (diminishing returns)."""
    l2, l4, l8 = (by_seed(ratios[r]) for r in (2.0, 4.0, 8.0))
    gain_24 = stats.compare(l4, l2)  # loss(2) − loss(4): what going from 2× to 4× buys
    gain_48 = stats.compare(l8, l4)  # loss(4) − loss(8)
    common = set(l2) & set(l4) & set(l8)
    effect = stats.one_sample({s: (l2[s] - l4[s]) - (l4[s] - l8[s]) for s in common})
    if effect.n < 2 and min(len(l2), len(l4), len(l8)) >= 2:  # no shared seeds: unpaired difference of gains
        effect = stats.welch([l4[s] - l8[s] for s in set(l4) & set(l8)], [l2[s] - l4[s] for s in set(l2) & set(l4)])
    ev.parts.append((f"{act} at fixed d_model: 2→4 gain", stats.verdict_better(gain_24)))
    ev.parts.append((f"{act} at fixed d_model: Δ(2→4) − Δ(4→8)", stats.verdict_better(effect)))
    ev.effect += f"{'; ' if ev.effect else ''}{act}: Δ(2→4) − Δ(4→8) = {fmt_interval(effect)}"
    ev.n = min_n(ev.n, effect.n)
    ev.details += [f"- {act}, fixed d_model: Δ(2→4) = loss(2×) − loss(4×) = {fmt_interval(gain_24)}; "
                   f"Δ(4→8) = {fmt_interval(gain_48)}; Δ(2→4) − Δ(4→8) = {fmt_interval(effect)} (n = {effect.n})"]


def _fixed_budget(act: str, ratios: dict[float, list[Run]], ev: Evidence) -> None:
    """At a fixed non-embedding budget: no other ratio may beat 4×."""
    l4 = by_seed(ratios[4.0])
    beaten, ns = [], []
    for ratio in sorted(r for r in ratios if r != 4.0):
        diff = stats.compare(by_seed(ratios[ratio]), l4)  # loss(4) − loss(r): > 0 means r beats 4×
        ns.append(diff.n)
        ev.details.append(f"- {act}, fixed budget: loss(4×) − loss({ratio:g}×) = {fmt_interval(diff)} (n = {diff.n})")
        if stats.verdict_better(diff).verdict == SUPPORTED:
            beaten.append(f"{ratio:g}×")
    label = f"{act} at a fixed budget: 4× not beaten"
    if beaten:
        ev.parts.append((label, Verdict(CONTRADICTED, f"beaten by {', '.join(beaten)} (95% CI above 0)")))
    elif min(ns) < 2:
        ev.parts.append((label, Verdict(INCONCLUSIVE, stats.ONE_SEED)))
    else:
        ev.parts.append((label, Verdict(SUPPORTED, "no other ratio's loss is significantly below 4×'s")))
    ev.n = min_n(ev.n, min(ns))


def _largest(series: dict[Series, dict[float, list[Run]]], need: set[float], base: Setting | None) -> Series | None:
    """The series holding every ratio in `need` with the most seeds (then the sweep's common setting)."""
    ok = [k for k, ratios in series.items() if need <= set(ratios)]
    return min(ok, key=lambda k: (-min(len(by_seed(series[k][r])) for r in need), k.setting != base, str(tuple(k))),
               default=None)


def c1(obs: Observations) -> Evidence:
    ev = Evidence()
    seen_width_runs = False
    for act in ("relu", "gelu"):
        for fixed_budget in (False, True):
            series = _width_series(obs.runs, act, fixed_budget)
            if not series:
                continue
            seen_width_runs = True
            need = {4.0} if fixed_budget else {2.0, 4.0, 8.0}
            key = _largest(series, need, obs.base_setting)
            if key is None or (fixed_budget and len(series[key]) < 2):
                found = sorted({r for ratios in series.values() for r in ratios})
                what = "4× and another ratio" if fixed_budget else "2×, 4× and 8×"
                ev.parts.append((f"{act} {'fixed budget' if fixed_budget else 'fixed d_model'}",
                                 Verdict(INCONCLUSIVE, f"needs {what} (found {', '.join(f'{x:g}×' for x in found)}): "
                                                       "run `make sweep EXP=widths`")))
                continue
            heading = f"\n{act}, {describe_setting(key.setting)}, lr {key.lr:g}:\n"
            ev.details += [heading, *_series_table(act, series[key]), ""]
            (_fixed_budget if fixed_budget else _fixed_d)(act, series[key], ev)
    if ev.n is None and seen_width_runs:
        ev.n = 0  # runs exist, just not the ones the rule needs (not "not in this sweep")
    return ev
