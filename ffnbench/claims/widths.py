"""C1: d_ff = 4·d_model is the sweet spot of the width ratio (docs/claims.md §C1). Decided at a fixed
non-embedding parameter budget, where a wider FFN costs d_model; the fixed-d_model arm is only described."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import NamedTuple

import ffnbench.claims.robust as robust
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_ci, fmt_interval, fmt_mean_std
from ffnbench.claims.lr_protocol import chosen_lrs, tuning_key
from ffnbench.claims.pairing import FRESH_SEEDS, ONE_LR, Comparison, PairKey
from ffnbench.claims.runs import (
    Run,
    Setting,
    by_seed,
    describe_setting,
    is_reference,
    outcomes_by_seed,
    setting_without,
    summary_of,
)
from ffnbench.stats.intervals import compare
from ffnbench.stats.verdicts import INCONCLUSIVE, Verdict

SWEET = 4.0  # the ratio the claim calls the sweet spot
NEIGHBOURS = (2.0, 8.0)  # the ratios it must beat at a fixed budget


class Series(NamedTuple):
    """Ungated runs of one activation that differ only in their width ratio (and, when `lr` is None, in the lr
    each width's tuning runs chose for it)."""

    setting: Setting
    bias: bool
    multiple_of: int
    lr: float | None  # None: each width at its own tuned lr (ffnbench.sweep.tuning)


def _width_series(obs: Observations, act: str, fixed_budget: bool) -> dict[Series, dict[float, list[Run]]]:
    """Ungated runs of one activation by series, then by width ratio. A width with tuning runs joins the
    tuned series (lr None) with its judged runs at the lr those chose (pairing.best_lr); the others join the
    series of their lr."""
    def mine(r: Run) -> bool:
        return r.act == act and not r.gated and bool(r.factor("model.non_embedding_params")) == fixed_budget

    chosen = chosen_lrs(r for r in obs.tuning if mine(r))
    series: dict[Series, dict[float, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in obs.runs:
        if not mine(r):
            continue
        if tuning_key(r) in chosen:
            if r.lr == chosen[tuning_key(r)]:
                series[Series(r.setting, r.bias, r.multiple_of, None)][r.ratio].append(r)
        else:
            series[Series(r.setting, r.bias, r.multiple_of, r.lr)][r.ratio].append(r)
    return series


def _lr_text(key: Series, ratios: dict[float, list[Run]]) -> str:
    if key.lr is not None:
        return f"lr {key.lr:g}"
    return "each width at its tuned lr (" + ", ".join(f"{x:g}×: {ratios[x][0].lr:g}" for x in sorted(ratios)) + ")"


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
    """At a fixed d_model, described only: the loss each doubling of the width buys. Returns that diminish
    are no sweet spot (every power law L = c + a·r^(−α) shows them, at 2× as at 4×), so nothing here decides."""
    rs = sorted(ratios)
    for lo, hi in pairwise(rs):
        gain = compare(by_seed(ratios[hi]), by_seed(ratios[lo]))  # loss(lo) − loss(hi)
        ev.details.append(f"- {act}, fixed d_model: Δ({lo:g}→{hi:g}) = loss({lo:g}×) − loss({hi:g}×) = "
                          f"{fmt_interval(gain)} (n = {gain.n})")
    ev.details.append(f"- {act}, fixed d_model: describes diminishing returns only, and does not decide (any power "
                      "law L = c + a·r^(−α) has them)")


def _same_choice(pool: tuple[Run, ...], runs: list[Run]) -> tuple[Run, ...]:
    """The runs of `pool` that share the lr choice of `runs` (one width's judged runs): those of their tuning key —
    the tuning runs that chose it, or the judged runs at its neighbours (lr_protocol.judge_neighbours)."""
    key = tuning_key(runs[0])
    return tuple(r for r in pool if tuning_key(r) == key)


def _comparison(obs: Observations, act: str, key: Series, ratios: dict[float, list[Run]], other: float) -> Comparison:
    """loss(other×) − loss(4×) in one series, paired by seed, with each width's tuning runs (the lr check's) and its
    judged runs at its chosen lr's neighbours (claims.robust's nested interval, which holds the lr choice)."""
    tuned = key.lr is None

    def of(pool: tuple[Run, ...], ratio: float) -> tuple[Run, ...]:
        return _same_choice(pool, ratios[ratio]) if tuned else ()

    return Comparison(a=f"{act} {SWEET:g}×", b=f"{act} {other:g}×",
                      key=PairKey(key.setting, bias=key.bias, multiple_of=key.multiple_of),
                      lr=_lr_text(key, ratios), best_lr=tuned, a_runs=tuple(ratios[SWEET]),
                      b_runs=tuple(ratios[other]), protocol=ONE_LR if not tuned else FRESH_SEEDS,
                      a_tuning=of(obs.tuning, SWEET), b_tuning=of(obs.tuning, other),
                      a_neighbours=of(obs.neighbours, SWEET), b_neighbours=of(obs.neighbours, other))


def _fixed_budget(obs: Observations, act: str, key: Series, series: dict[Series, dict[float, list[Run]]],
                  ev: Evidence) -> None:
    """At a fixed non-embedding budget: 4× must beat both neighbours, 2× and 8×, each paired by seed (one part
    each, Holm-corrected with the claim's other parts by stats.multiplicity.combine), each checked across the
    other series that ran it (claims.robust: lr, init, length); the other ratios are described."""
    ratios = series[key]
    effects = []
    for other in sorted(ratios):
        if other == SWEET:
            continue
        comp = _comparison(obs, act, key, ratios, other)
        what = f"{act}: loss({other:g}×) − loss({SWEET:g}×)"
        deciding = other in NEIGHBOURS
        ev.details += comp.evidence(what, deciding)
        if deciding:
            others = [_comparison(obs, act, k, rs, other) for k, rs in series.items()
                      if k != key and {SWEET, other} <= set(rs)]
            checked = robust.check(comp, [comp, *others], robust.beats_rule("C1"), what, robust.beats_sides("C1"))
            ev.where = ev.where or comp.key.setting
            ev.parts.append((f"{act} at a fixed budget: {SWEET:g}× beats {other:g}×", checked.verdict))
            ev.add_unchecked(checked.missing)
            ev.n = min_n(ev.n, comp.n)
            effects.append(f"loss({other:g}×) − loss({SWEET:g}×) = {fmt_interval(checked.deciding.diff)}"
                           + (f" [{', '.join(checked.labels)}]" if checked.labels else ""))
            ev.note(f"loss({other:g}×) − loss({SWEET:g}×)", checked.deciding.diff, checked.labels)
            ev.details += [f"- {checked.summary()} (deciding comparison, {comp.where})", *checked.lines]
    ev.effect += f"{'; ' if ev.effect else ''}{act} at a fixed budget: {'; '.join(effects)}"


# What a fixed-budget series' setting holds that the base setting's does not: the budget, and the shape solved for it
_SOLVED = ("model.non_embedding_params", "model.d_model", "model.n_head")


def _largest(series: dict[Series, dict[float, list[Run]]], need: set[float], base: Setting | None) -> Series | None:
    """The series that decides, pre-registered as pairing.primary's comparison is, so that adding seeds to another
    series cannot change which one decides: among those holding every ratio in `need`, a tuned one (each width at
    its own lr), in the reference setting (GPT-2 init, no qk-norm or z-loss), then the one like the sweep's base
    setting but for the budget and the shape solved for it, then the shorter training (the longer one is the
    length check's); only then the most seeds in its thinnest ratio (of `need`, or of all when `need` is empty),
    then the most ratios."""
    def like_base(s: Setting) -> bool:
        return base is not None and setting_without(s, *_SOLVED) == setting_without(base, *_SOLVED)

    def rank(k: Series) -> tuple:
        seeds = min(len(outcomes_by_seed(series[k][r])) for r in (need or series[k]))
        return (k.lr is not None, not is_reference(k.setting), not like_base(k.setting),
                dict(k.setting).get("trainer.tokens_per_param") or 0, -seeds, -len(series[k]), str(tuple(k)))

    return min((k for k, ratios in series.items() if need <= set(ratios)), key=rank, default=None)


def _table(act: str, key: Series, ratios: dict[float, list[Run]]) -> list[str]:
    return [f"\n{act}, {describe_setting(key.setting)}, {_lr_text(key, ratios)}:\n", *_series_table(act, ratios), ""]


def _activation(obs: Observations, act: str, ev: Evidence) -> bool:
    """One activation's share of C1 (its fixed-budget parts, its fixed-d_model description); False when it
    has no width arm at all. A series with one ratio is no width arm (e.g. the headline relu at 4×)."""
    fixed_d, fixed_b = ({k: v for k, v in _width_series(obs, act, fixed).items() if len(v) >= 2}
                        for fixed in (False, True))
    if fixed_d:
        key = _largest(fixed_d, set(), obs.base_setting)
        ev.details += _table(act, key, fixed_d[key])
        _fixed_d(act, fixed_d[key], ev)
    if not fixed_b:
        if fixed_d:
            ev.parts.append((f"{act} at a fixed budget", Verdict(INCONCLUSIVE, "only the fixed-d_model arm ran, which "
                             "cannot tell a sweet spot from diminishing returns: run `make sweep EXP=widths` (its "
                             "model.non_embedding_params arm)")))
        return bool(fixed_d)
    key = _largest(fixed_b, {*NEIGHBOURS, SWEET}, obs.base_setting)
    if key is None:
        found = sorted({r for ratios in fixed_b.values() for r in ratios})
        ev.parts.append((f"{act} at a fixed budget", Verdict(INCONCLUSIVE, f"needs 2×, 4× and 8× (found "
                         f"{', '.join(f'{x:g}×' for x in found)}): run `make sweep EXP=widths`")))
        return True
    ev.details += _table(act, key, fixed_b[key])
    _fixed_budget(obs, act, key, fixed_b, ev)
    for other in sorted((k for k in fixed_b if k != key), key=lambda k: str(tuple(k))):
        # every other series, side by side (those at tuned lrs are the robustness lines' other cells)
        ev.details += ["", f"Shown beside it, not deciding: {act}, {describe_setting(other.setting)}, "
                       f"{_lr_text(other, fixed_b[other])}:", "", *_series_table(act, fixed_b[other]), ""]
    return True


def c1(obs: Observations) -> Evidence:
    ev = Evidence()
    seen_width_runs = [_activation(obs, act, ev) for act in ("relu", "gelu")]
    if ev.n is None and any(seen_width_runs):
        ev.n = 0  # runs exist, just not the ones the rule needs (not "not in this sweep")
    ran = [act for act, seen in zip(("relu", "gelu"), seen_width_runs) if seen]
    if ran and len(ran) < 2:  # the rule asks every activation: say which one the verdict rests on
        ev.effect += f" (only {ran[0]} ran a width arm)"
    return ev
