"""C3, C4, C8, C13: one activation against another at a matched parameter budget, paired by seed
(docs/claims.md §C3, §C4, §C8, §C13)."""

from __future__ import annotations

import math

import ffnbench.claims.robust as robust
from ffnbench.claims.band import in_band
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_interval, fmt_mean_std
from ffnbench.claims.lr_checks import (
    LR_ROBUST,
    LR_SENSITIVE,
    WITHHELD,
    both_neighbours,
    judged_pairs,
    kept,
    nested_interaction,
)
from ffnbench.claims.margins import margin_nats
from ffnbench.claims.pairing import (
    Comparison,
    PairKey,
    act_is,
    compare_sides,
    fewer_failures,
    matched_key,
    primary,
    without_factor,
)
from ffnbench.claims.runs import summary_of
from ffnbench.model.ffn import FeedForward, FFNSpec
from ffnbench.stats.intervals import Paired, one_sample
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict, verdict_beats


def comparison_claim(obs: Observations, a: str, b: str, what: str, claim: str) -> tuple[Evidence, Comparison | None]:
    """The shared shape of "a beats b" claims: every matched comparison of b − a, the primary one deciding
    (rule: supported if its 95% CI lies above 0, contradicted if below 0, after the budget-match check and
    the divergence rule of pairing.Comparison); each comparison's lr protocol and sign along the curve are
    shown."""
    comps = compare_sides(obs.with_neighbours, act_is(a), act_is(b), matched_key, (a, b))
    best = primary(comps, obs.base_setting)
    ev = Evidence()
    if best is None:
        return ev, None
    checked = robust.check(best, comps, robust.beats_rule(claim), what, robust.beats_sides(claim))
    ev.where = best.key.setting
    ev.parts.append((what, checked.verdict))
    ev.add_unchecked(checked.missing)
    ev.effect = f"{what} = {fmt_interval(checked.deciding.diff)}" + (f" [{', '.join(checked.labels)}]"
                                                                      if checked.labels else "")
    ev.note(what, checked.deciding.diff, checked.labels)
    ev.n = best.n
    ev.details = [line for c in comps for line in c.evidence(what, c is best)]
    ev.details += [f"- {checked.summary()} (deciding comparison, {best.where})", *checked.lines]
    ev.details += init_sensitivity(comps, best, what)
    return ev, best


def init_sensitivity(comps: list[Comparison], best: Comparison, what: str) -> list[str]:
    """Whether the deciding comparison's ranking survives the other FFN initialisation (model.ffn_init: GPT-2
    init gives the variants output scales ~10× apart at init, `matched` equalises them): the same comparison
    with only ffn_init changed, and whether its interval agrees in sign. Evidence only: it does not decide."""
    init = best.key.factor("model.ffn_init")
    rest = without_factor(best.key, "model.ffn_init")
    others = [c for c in comps if c.key.factor("model.ffn_init") != init
              and without_factor(c.key, "model.ffn_init") == rest and c.best_lr == best.best_lr]
    if not others:
        return []
    other = max(others, key=lambda c: c.n)
    d, o = best.diff, other.diff
    if not o.has_ci or not d.has_ci:
        outcome = "undecided (no interval on one side)"
    elif (o.ci_low > 0 and d.ci_low > 0) or (o.ci_high < 0 and d.ci_high < 0):
        outcome = "survives (both intervals exclude 0 with the same sign)"
    elif (o.ci_low > 0 and d.ci_high < 0) or (o.ci_high < 0 and d.ci_low > 0):
        outcome = "reverses (the intervals exclude 0 with opposite signs)"
    else:
        outcome = "is not settled (an interval contains 0)"
    return [f"- init sensitivity: {what} under model.ffn_init={other.key.factor('model.ffn_init')} "
            f"({other.lr}) = {fmt_interval(o)} (n = {o.n}) against {fmt_interval(d)} under {init}: the ranking "
            f"{outcome}"]


def c3(obs: Observations) -> Evidence:
    return comparison_claim(obs, "swiglu", "gelu", "loss(gelu) − loss(swiglu)", "C3")[0]


def _stability(obs: Observations, key: PairKey, acts: tuple[str, ...]) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """Over the lr grid of one matched setting: per activation, the lrs run, diverged runs, and the spread of
    the mean final loss across lrs; and (diverged, finished + diverged) runs per activation. Only the (lr, seed)
    cells every activation ran count, so that a side's extra seeds at its own tuned lr do not weigh in."""
    lines = ["", "| variant | lr | finished | diverged | val loss (mean ± std) |", "|---|---|---|---|---|"]
    counts: dict[str, tuple[int, int]] = {}
    # the lr grid: the tuning runs too (a robust preset judges each variant at one tuned lr; its grid is its tuning)
    ran = {act: [r for r in obs.with_tuning if r.act == act and matched_key(r) == key and (r.usable or r.diverged)]
           for act in acts}
    cells = set.intersection(*({(r.lr, r.seed) for r in runs} for runs in ran.values()))
    for act in acts:
        runs = [r for r in ran[act] if (r.lr, r.seed) in cells]
        counts[act] = (sum(r.diverged for r in runs), len(runs))
        means = []
        for lr in sorted({r.lr for r in runs}):
            at = [r for r in runs if r.lr == lr]
            s = summary_of(at)
            means += [s.mean] if s.mean is not None else []
            lines.append(f"| {act} | {lr:g} | {sum(r.usable for r in at)} | {sum(r.diverged for r in at)} "
                         f"| {fmt_mean_std(s)} |")
        spread = f"{max(means) - min(means):.4f} nats" if len(means) >= 2 else "n/a"
        lines.insert(0, f"- {act}: {counts[act][0]} of {counts[act][1]} runs diverged; spread of the mean final loss "
                        f"across lrs: {spread}")
    return lines, counts


def c4(obs: Observations) -> Evidence:
    ev, best = comparison_claim(obs, "gelu", "relu", "loss(relu) − loss(gelu)", "C4")
    if best is None:
        return ev
    lrs = {act: {r.lr for r in obs.with_tuning if r.act == act and matched_key(r) == best.key}
           for act in ("relu", "gelu")}
    if min(len(v) for v in lrs.values()) >= 2:
        lines, counts = _stability(obs, best.key, ("relu", "gelu"))
        ev.details += ["", f"Stability over the lr grid ({best.key.describe()}):", *lines]
        ev.parts.append(("stability", fewer_failures("gelu", *counts["gelu"], "relu", *counts["relu"], unit="runs")))
    else:
        ev.details.append("- stability: no lr grid for both relu and gelu in this sweep (`make sweep EXP=sparsity`)")
    return ev


def c8(obs: Observations) -> Evidence:
    comps = compare_sides(obs.with_neighbours, act_is("swish"), act_is("relu"), matched_key, ("swish", "relu"))
    ev = Evidence()
    if not comps:
        return ev
    what = "loss(relu) − loss(swish)"
    depths = sorted({c.key.factor("model.n_layer") for c in comps})
    deciding: list[Comparison] = []
    robustness: list[str] = []
    for depth in depths:
        at_depth = [c for c in comps if c.key.factor("model.n_layer") == depth]
        best = primary(at_depth, _at_depth(obs.base_setting, depth))
        checked = robust.check(best, at_depth, robust.beats_rule("C8"), f"{what} at {depth} layers",
                               robust.beats_sides("C8"))
        ev.parts.append((f"swish beats relu at {depth} layers", checked.verdict))
        ev.add_unchecked(checked.missing)
        robustness.append(f"- {depth} layers: {checked.summary()} (deciding comparison, {best.where})")
        robustness += checked.lines
        ev.n = min_n(ev.n, best.n)
        ev.where = ev.where or best.key.setting
        deciding.append(best)
        ev.effect += (f"{'; ' if ev.effect else f'{what}: '}{depth} layers {fmt_interval(checked.deciding.diff)}"
                      + (f" [{', '.join(checked.labels)}]" if checked.labels else ""))
        ev.note(f"{depth} layers", checked.deciding.diff, checked.labels)
    ev.details = [line for c in comps for line in c.evidence(what, any(c is d for d in deciding))] + robustness
    if len(depths) < 2:
        ev.parts.append(("more so in deeper networks",
                         Verdict(INCONCLUSIVE, "needs two depths: run `make sweep EXP=depth`")))
        return ev
    shallow, deep = _depth_pair(comps, depths[0], depths[-1], prefer=(deciding[0], deciding[-1]))
    # depth at matched tokens where the sweep ran it (the deep side the deciding one): else depth and length move
    # together, and the interaction says so
    matched_pairs = _depth_pairs(comps, depths[0], depths[-1], matched=True)
    at_matched = [(s, d) for s, d in matched_pairs
                  if deep is not None and d is deep and s.key.factor("trainer.tokens_per_param")
                  != d.key.factor("trainer.tokens_per_param")]
    confounded = not at_matched and shallow is not None and _confounded((shallow, deep))
    if at_matched:
        shallow, deep = at_matched[0]
    if shallow is None:
        ev.parts.append(("more so in deeper networks",
                         Verdict(INCONCLUSIVE, "no pair of depths with otherwise equal settings")))
        return ev
    # what is measured: Δ = loss(relu) − loss(swish) grows with depth (swish's edge grows, or its deficit shrinks)
    label = f"loss(relu) − loss(swish) larger at {depths[-1]} than at {depths[0]} layers"
    interaction, v = _interaction(shallow, deep)
    # read again in the cells that vary one factor (init, 4× the tokens, size), each pair in its own setting; its lr
    # check: its sign at every pair of judged lrs at both depths (where both were judged at their neighbours)
    rest = without_factor(deep.key, "model.n_layer")  # the deep side: at matched tokens the shallow one trains longer
    # each cell's pair keyed by its deep side, at matched tokens where the deciding pair is and the cell ran one
    pairs = _depth_pairs(comps, depths[0], depths[-1])
    pairs += matched_pairs if at_matched else []
    others = {without_factor(d.key, "model.n_layer"): (s, d) for s, d in pairs
              if (s.best_lr, s.protocol) == (shallow.best_lr, shallow.protocol)}  # lrs chosen as the deciding pair's

    def where(pair: tuple[Comparison, Comparison]) -> str:
        """The pair's setting, saying the tokens each depth trained where they differ in tokens per parameter
        (matched tokens) or in tokens (depth confounded with tokens)."""
        s, d = pair
        text = s.key.describe().replace(f"{depths[0]} layers", f"{depths[0]} and {depths[-1]} layers")
        tps, tpd = s.key.factor("trainer.tokens_per_param"), d.key.factor("trainer.tokens_per_param")
        if tps != tpd and tps is not None and tpd is not None:
            return text.replace(f"{tps:g} tokens/param", f"{tps:g} and {tpd:g} tokens/param: matched tokens, "
                                                         f"{(robust.tokens(d) or 0) / 1e6:.2f}M")
        if _confounded(pair):
            return f"{text} ({DEPTH_CONFOUNDED}: {(robust.tokens(s) or 0) / 1e6:.2f}M and " \
                   f"{(robust.tokens(d) or 0) / 1e6:.2f}M tokens)"
        return text

    def decides(k) -> bool | str:
        """Whether the cell at `k` may decide: in the band, and, where the deciding pair trained matched tokens, its
        own pair too (else it reads depth and length at once: shown, not deciding, its factor unchecked)."""
        if not in_band(k.setting):
            return False
        return DEPTH_CONFOUNDED if at_matched and _confounded(others[k]) else True

    cells = {factor: [(where(others[k]), _interaction(*others[k])[1], decides(k)) for k in keys]
             for factor, keys in robust.other_cells(rest, others).items()}
    side = robust.beats_region(v, margin_nats("C8", deep))
    lr_pairs = _interaction_lr_pairs(shallow, deep, interaction, side)
    checked = robust.cell_check(v, where((shallow, deep)), cells, inherent=("lr",) if lr_pairs else (),
                                here_in_band=in_band(rest.setting))
    if lr_pairs:  # the nested interval counted the lr choice: a pair of judged lrs in another region is a label
        checked.labels.append(lr_pairs[0])
        checked.lines.append(lr_pairs[1])
    elif both_neighbours(shallow) and both_neighbours(deep):  # neighbour runs, but no nested interval: say why
        checked.unchecked = [f"lr ({WITHHELD})" if u.startswith("lr (") else u for u in checked.unchecked]
    if confounded:
        checked.labels.append(DEPTH_CONFOUNDED)
        checked.lines.append(f"  - {DEPTH_CONFOUNDED}: at equal tokens per parameter {depths[0]} layers trained "
                             f"{(robust.tokens(shallow) or 0) / 1e6:.2f}M tokens, {depths[-1]} layers "
                             f"{(robust.tokens(deep) or 0) / 1e6:.2f}M; no pair at matched tokens ran")
    elif at_matched:
        checked.lines.append(f"  - depths at matched tokens ({(robust.tokens(deep) or 0) / 1e6:.2f}M): {depths[0]} "
                             f"layers at {shallow.key.factor('trainer.tokens_per_param'):g} tokens/param")
    ev.add_part(label, checked.verdict, checked.missing)
    ev.n = min_n(ev.n, interaction.n)
    ev.effect += f"; depth interaction = {fmt_interval(interaction)}" + (
        f" [{', '.join(checked.labels)}]" if checked.labels else "")
    ev.note("depth interaction", interaction, checked.labels)
    ev.details.append(f"- depth interaction: [loss(relu) − loss(swish)] at {depths[-1]} layers minus at {depths[0]} "
                      f"layers = {fmt_interval(interaction)} (n = {interaction.n}"
                      + (f"; nested bootstrap over the four lr choices{kept(interaction)}"
                         if interaction.method == "nested bootstrap" else "")
                      + f"), in {where((shallow, deep))}; {checked.summary()}")
    ev.details += checked.lines
    return ev


def _interaction_lr_pairs(shallow: Comparison, deep: Comparison, interaction: Paired, side
                          ) -> tuple[str, str] | None:
    """The interaction's lr check where its interval is the nested one (every side judged at its chosen lr's
    neighbours: lr_checks.nested_interaction): Δ(deep) − Δ(shallow) from the judged seeds' paired differences at
    every pair of judged lrs of each depth (up to 9 × 9 combinations) stays in the interaction's region of the
    outcome table (`side`: its sign, or below +m where it is contradicted) (lr-robust) or not (lr-sensitive: a
    label, as lr_checks.pairs_check gives one comparison; the interval already includes the lr choice). The label
    and its line; None where the interval is the judged seeds' alone (lr unchecked)."""
    if interaction.method != "nested bootstrap" or interaction.mean is None:
        return None
    per_depth = [[d.mean for d in judged_pairs(c).values()] for c in (shallow, deep)]
    combos = [d - s for s in per_depth[0] for d in per_depth[1]]
    if not combos:
        return None
    other = sum(side(x) != side(interaction.mean) for x in combos)
    label = LR_SENSITIVE if other else LR_ROBUST
    return label, (f"  - {label} across the judged lrs: Δ(deep) − Δ(shallow) at every pair of judged lrs at both "
                   f"depths ({len(combos)} combinations: {min(combos):+.3f} to {max(combos):+.3f}"
                   + (f"; {other} of {len(combos)} in another region of the outcome table — a label: the nested "
                      "interval already includes the lr choice)" if other else ")"))


def _interaction(shallow: Comparison, deep: Comparison) -> tuple[Paired, Verdict]:
    """[loss(relu) − loss(swish)] deep minus shallow over the seeds both depths ran, with the four lr choices inside
    its interval where every side was judged at its neighbours (lr_checks.nested_interaction), and its verdict: the
    outcome table with C8's margin at the deep side's loss (a flat interaction is a null that can be concluded),
    inconclusive where a side diverged differently."""
    d_s, d_d = shallow.seed_diffs, deep.seed_diffs
    judged = one_sample({s: d_d[s] - d_s[s] for s in set(d_s) & set(d_d)})
    interaction = nested_interaction(shallow, deep, judged) or judged
    diverging = [str(c.divergence) for c in (shallow, deep) if c.divergence.differs]
    return interaction, (Verdict(INCONCLUSIVE, "; ".join(diverging)) if diverging
                         else verdict_beats(interaction, margin_nats("C8", deep)))


def _at_depth(base, depth: int):
    """The base setting with its depth set to `depth` (C8 decides at each depth in the base setting otherwise)."""
    if base is None:
        return None
    return tuple((k, depth if k == "model.n_layer" else v) for k, v in base)


DEPTH_CONFOUNDED = "depth confounded with tokens"


def _confounded(pair: tuple[Comparison, Comparison]) -> bool:
    """Whether a pair of depths trained unequal tokens (or tokens no record states)."""
    return not robust.matched(robust.tokens(pair[0]), robust.tokens(pair[1]))


def _depth_pairs(comps: list[Comparison], shallow: int, deep: int, matched: bool = False
                 ) -> list[tuple[Comparison, Comparison]]:
    """The comparisons at the two depths that agree on everything else (the setting and how the lrs were chosen),
    one pair each (the one with the most shared seeds where there are several). Tokens scale with the non-embedding
    parameters, so at equal tokens per parameter the shallow side trains fewer tokens; `matched`: the pairs that
    trained the same tokens instead (the shallow side at deep/shallow times the tokens per parameter), keyed by the
    deep side's setting."""
    def rest(c: Comparison, drop: tuple[str, ...]) -> tuple:
        key = without_factor(c.key, "model.n_layer")
        for f in drop:
            key = without_factor(key, f)
        # a tuned comparison's lr text names each depth's own tuned lrs: pair on the protocol, not that text
        return (key, c.best_lr, c.protocol, None if c.best_lr else c.lr)

    drop = ("trainer.tokens_per_param",) if matched else ()
    best: dict = {}
    for s in comps:
        for d in comps:
            if s.key.factor("model.n_layer") == shallow and d.key.factor("model.n_layer") == deep \
                    and rest(s, drop) == rest(d, drop) \
                    and (not matched or robust.matched(robust.tokens(s), robust.tokens(d))):
                shared = len(set(s.seed_diffs) & set(d.seed_diffs))
                key = rest(d, ()) if matched else rest(s, drop)
                if key not in best or shared > best[key][0]:
                    best[key] = (shared, s, d)
    return [(s, d) for _, s, d in best.values()]


def _depth_pair(comps: list[Comparison], shallow: int, deep: int,
                prefer: tuple[Comparison, Comparison] | None = None) -> tuple[Comparison | None, Comparison | None]:
    """The pair of depths that decides the interaction: `prefer` (the per-depth deciding comparisons, in the base
    setting) where they agree on everything else, else the pair with the most shared seeds."""
    pairs = _depth_pairs(comps, shallow, deep)
    if prefer is not None and any(p[0] is prefer[0] and p[1] is prefer[1] for p in pairs):
        return prefer
    if not pairs:
        return None, None
    return max(pairs, key=lambda p: len(set(p[0].seed_diffs) & set(p[1].seed_diffs)))


def c13(obs: Observations) -> Evidence:
    ev = Evidence()
    for other in ("gelu", "swiglu"):
        part, best = comparison_claim(obs, other, "linear", f"loss(linear) − loss({other})", "C13")
        ev.parts += [(f"linear worse than {other}", v) for _, v in part.parts] or \
            [(f"linear worse than {other}", Verdict(INCONCLUSIVE, f"no linear and {other} runs at a matched budget"))]
        ev.details += part.details
        ev.add_unchecked(part.unchecked)
        if best is not None:
            ev.where = ev.where or part.where
            ev.n = min_n(ev.n, part.n)
            ev.effect += f"{'; ' if ev.effect else ''}{part.effect}"
            ev.merge(part)
    err = linear_collapse_error()
    # the bound, not the digits: float64 rounding differs by CPU and BLAS (1.2e-15 on one machine, 1.5e-15 on another)
    shown = "0" if err == 0 else f"< 1e{math.ceil(math.log10(err)):d}"
    ev.parts.append(("a linear FFN is one d×d map", Verdict(SUPPORTED if err < 1e-9 else CONTRADICTED,
                                                             f"relative max |FFN(x) − (xWᵀ + b)| {shown}")))
    ev.details.append(f"- analytic: a `linear` FeedForward (d_model 64, d_ff 256, biases) equals the single affine "
                      f"map W = W_down·W_up, b = W_down·b_up + b_down: relative max difference {shown} (float64)")
    return ev


def linear_collapse_error(d_model: int = 64) -> float:
    """Build a `linear` FFN, compose its two matrices into one, and compare the outputs on random inputs."""
    import torch

    gen = torch.Generator().manual_seed(0)
    ffn = FeedForward(d_model, FFNSpec("linear", width=4, bias=True)).double()
    with torch.no_grad():
        for p in ffn.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
        w = ffn.w_down.weight @ ffn.w_up.weight
        b = ffn.w_down.weight @ ffn.w_up.bias + ffn.w_down.bias
        x = torch.randn(32, d_model, generator=gen, dtype=torch.float64)
        return float((ffn(x) - (x @ w.T + b)).abs().max() / (x @ w.T + b).abs().max())
