"""Whether a deciding comparison's verdict survives the nuisance choices a reviewer would vary (DESIGN §9):

- **lr**: a best-vs-best difference (each side at its tuned lr, judged on fresh seeds) is *lr-robust* only if its
  sign holds at every pair of judged lrs where both sides were also judged at their chosen lr's neighbours; else
  if the paired shared-lr differences on the tuning seeds, at both sides' chosen lrs, have its sign (and, where one
  side alone has neighbour runs, so does every pair of judged lrs). Otherwise the gap is (partly) which lr each
  side got, and the verdict is *inconclusive (lr-dependent)*.
- **bracketing**: a side whose chosen lr sits at an edge of the lrs its tuning runs tried is named *optimum not
  bracketed* (a better lr may lie beyond: its verdict is kept, and the label says so).
- **init**: the same comparison under the other init convention (model.init), with its own lr protocol. A decided
  verdict stands only if every init gives the same decided verdict; otherwise *inconclusive (init-dependent)*.
- **training length**: the same comparison at 4× the tokens (trainer.tokens_per_param). An effect that shrinks by
  more than half from 1× to 4× is *early-training*; one that changes sign makes the verdict *inconclusive
  (early-training)*.
- **size**: the same comparison at another d_model, where the sweep ran one: a decided verdict stands only if it
  gives the same verdict; otherwise *inconclusive (size-dependent)*.
- **stability options** (qk-norm and z-loss): shown beside it; they do not decide.

Each check says whether it could be made: a label that could not be checked for lack of runs is listed as such."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.lr_protocol import ROBUST_MIN_LRS, ROBUST_MIN_SEEDS, bracketing
from ffnbench.claims.pairing import (
    FRESH_SEEDS,
    Comparison,
    PairKey,
    paired_difference,
    shared_lr_differences,
    window_losses,
    without_factor,
)
from ffnbench.claims.runs import INIT_FACTORS, Run, init_name, outcomes_by_seed, run_by_seed
from ffnbench.stats.bootstrap import hull, nested_lr_bootstrap
from ffnbench.stats.intervals import Paired
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict, verdict_better

LR_ROBUST, LR_DEPENDENT = "lr-robust", "lr-dependent"
LR_TUNING_ONLY = "lr checked on tuning seeds only"  # no neighbour runs: the sign test on the tuning seeds
LR_ONE_SIDE = "lr checked on one side's judged neighbours"  # and on the tuning seeds, where they could check it
PLATEAU_EDGE = "plateau-edge"
REDUCED_GRID = "reduced grid"
SIZE_ROBUST, SIZE_DEPENDENT = "size-robust", "size-dependent"
NESTED = "nested bootstrap: tuning seeds resampled and each lr chosen again among its judged lrs, then judged seeds"
INIT_ROBUST, INIT_DEPENDENT = "init-robust", "init-dependent"
LENGTH_ROBUST, EARLY = "length-robust", "early-training"
NOT_BRACKETED = "optimum not bracketed"
LONGER = 4  # the length arm: this many times the deciding comparison's tokens per parameter
DECIDED = (SUPPORTED, CONTRADICTED)

Rule = Callable[[Comparison], Verdict]


@dataclass(frozen=True)
class Unit:
    """The unit a rule reads its difference in, from a run's nats per token: `per_nat(run)` times its loss (C7's
    bits per byte: each run's final_val_bpb / final_val_loss). The nested interval is built in it."""

    name: str
    per_nat: Callable[[Run], float]


NATS = Unit("nats", lambda r: 1.0)


@dataclass
class Robustness:
    """A deciding comparison's verdict after the checks, its labels, the checks made and not made, and the numbers
    behind them (markdown lines)."""

    verdict: Verdict
    labels: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # the factors (lr, init, length) no runs varied: unchecked
    deciding: Comparison | None = None  # the comparison the verdict read: with the nested interval where it has one

    def downgrade(self, label: str, why: str) -> None:
        """A decided verdict becomes inconclusive (label), keeping what it would have been."""
        if self.verdict.verdict in DECIDED:  # the p-value stays: the part still counts in its claim's Holm family
            self.verdict = Verdict(INCONCLUSIVE, f"{label}: {why} (would be {self.verdict.verdict}: "
                                                 f"{self.verdict.reason})", self.verdict.p_value)

    def summary(self) -> str:
        text = f"robustness: {', '.join(self.labels) or 'no label'}"
        if self.unchecked:
            text += f"; not checked: {', '.join(self.unchecked)}"
        return text


def _sign(x: float | None) -> int:
    return 0 if not x else int(math.copysign(1, x))


def shared_lr(c: Comparison) -> dict[float, Paired]:
    """b − a on the tuning seeds both sides finished, at each lr both tried (pairing.shared_lr_differences)."""
    return shared_lr_differences(c.a_tuning, c.b_tuning)


Side = Callable[[float], int]  # a difference (nats) → the side of the rule's threshold it falls on: −1, 0 or +1


def _lr_checkable(c: Comparison) -> bool:
    """Whether `c` is best-vs-best on fresh seeds with a difference: what any check of its lr choice needs."""
    return bool(c.best_lr) and c.protocol == FRESH_SEEDS and c.diff.mean is not None


def lr_check(c: Comparison, side: Side | None = None) -> tuple[str | None, list[str]]:
    """LR_ROBUST, LR_DEPENDENT or None (not checkable), and the lines that show it: the shared-lr differences at
    both chosen lrs beside the best-vs-best one, and across the whole grid."""
    if not _lr_checkable(c):
        return None, []
    lr_a, lr_b = c.a_runs[0].lr, c.b_runs[0].lr
    shared = shared_lr(c)
    at = [lr for lr in dict.fromkeys((lr_a, lr_b))]
    missing = [lr for lr in at if lr not in shared]
    grid = "; ".join(f"{lr:g}: {shared[lr].mean:+.3f}" for lr in shared)
    lines = [f"  - shared-lr differences on the tuning seeds ({c.b} − {c.a}): {grid or 'none'}"]
    if missing:
        lines.append(f"  - lr-robust: not checked (no paired tuning runs at lr {', '.join(f'{x:g}' for x in missing)})")
        return None, lines
    side = side or _sign
    agree = all(side(shared[lr].mean) == side(c.diff.mean) for lr in at)
    label = LR_ROBUST if agree else LR_DEPENDENT
    at_text = ", ".join(f"{shared[lr].mean:+.3f} at {lr:g}" for lr in at)
    lines.append(f"  - {label}: best-vs-best {c.diff.mean:+.3f}; at the chosen lrs {at_text}"
                 + ("" if agree else " — they fall on the other side of the rule's threshold: the gap depends on "
                                     "which lr each side got"))
    return label, lines


def bracket_check(c: Comparison) -> list[str]:
    """The sides of `c` whose chosen lr sits at an edge of their tuning grid."""
    if not c.best_lr or c.protocol != FRESH_SEEDS:
        return []
    out = []
    for name, tuning, judged in ((c.a, c.a_tuning, c.a_runs), (c.b, c.b_tuning, c.b_runs)):
        note = bracketing(list(tuning), judged[0].lr) if tuning and judged else None
        if note:
            out.append(f"{name}: {note}")
    return out


def _partner(comps: list[Comparison], best: Comparison, factors: tuple[str, ...],
             want: Callable[[Comparison], bool] = lambda c: True) -> Comparison | None:
    """The comparison like `best` but for `factors` (one of them at least differing; `want` filters), at tuned
    lrs as `best` is; the one with the most seeds when several."""
    def rest(c: Comparison):
        key = c.key
        for f in factors:
            key = without_factor(key, f)
        return key

    found = [c for c in comps if c is not best and c.best_lr == best.best_lr and c.protocol == best.protocol
             and (best.best_lr or c.lr == best.lr) and rest(c) == rest(best)
             and any(c.key.factor(f) != best.key.factor(f) for f in factors) and want(c)]
    return max(found, key=lambda c: c.n) if found else None


@functools.lru_cache(maxsize=1024)  # a Comparison is hashed by identity; check(), the regime and a figure ask alike
def nested(c: Comparison, unit: Unit = NATS) -> Comparison | None:
    """`c` with the interval that includes the lr choice (stats.bootstrap.nested_lr_bootstrap, widened to contain
    the judged-only interval), in `unit`, where both sides were judged at a neighbour of their chosen lr too; None
    otherwise (records without neighbour runs: the verdict keeps the judged seeds' interval, and the lr check falls
    back to the tuning seeds). The lr is chosen again on the tuning runs' losses in nats, as the protocol chose it."""
    if not c.best_lr or c.protocol != FRESH_SEEDS or not c.a_neighbours or not c.b_neighbours:
        return None
    if c.diff.mean is None:
        return None

    def tuning(runs) -> dict[float, dict[int, float]]:
        out: dict[float, dict[int, float]] = {}
        for lr in sorted({r.lr for r in runs}):
            at = outcomes_by_seed(r for r in runs if r.lr == lr)
            out[lr] = {s: (math.inf if r.diverged else r.loss) for s, r in at.items()}
        return out

    def judged(runs) -> dict[float, dict[int, list[float]]]:
        out: dict[float, dict[int, list[float]]] = {}
        for lr in sorted({r.lr for r in runs}):
            for s, r in run_by_seed(x for x in runs if x.lr == lr).items():
                w = window_losses(r)
                out.setdefault(lr, {})[s] = list(w * unit.per_nat(r)) if w is not None else [r.loss * unit.per_nat(r)]
        return out

    chosen = (c.a_runs[0].lr, c.b_runs[0].lr)
    paired = nested_lr_bootstrap(tuning(c.a_tuning), tuning(c.b_tuning), judged((*c.a_runs, *c.a_neighbours)),
                                 judged((*c.b_runs, *c.b_neighbours)), chosen)
    if paired is None:
        return None
    return dataclasses.replace(c, interval=(hull(paired, judged_only(c, unit)),
                                            NESTED + ("" if unit is NATS else f", in {unit.name}")))


def judged_only(c: Comparison, unit: Unit = NATS) -> Paired:
    """b − a on the judged seeds at the chosen lrs alone, in `unit` (Comparison.diff where it has no interval of
    its own)."""
    return paired_difference(c.a_runs, c.b_runs, lambda r: None if r.loss is None else r.loss * unit.per_nat(r),
                             lambda r: None if (w := window_losses(r)) is None else w * unit.per_nat(r))[0]


def judged_lrs(c: Comparison) -> tuple[list[float], list[float]]:
    """Each side's judged lrs: its chosen one and the neighbours it was judged at."""
    return (sorted({r.lr for r in (*c.a_runs, *c.a_neighbours)}), sorted({r.lr for r in (*c.b_runs, *c.b_neighbours)}))


def judged_pairs(c: Comparison) -> dict[tuple[float, float], Paired]:
    """b − a on the judged seeds at each pair of judged lrs (a side's chosen lr and its neighbours) where both sides
    finished some seed: (lr of a, lr of b) → the paired difference."""
    lrs_a, lrs_b = judged_lrs(c)
    runs_a, runs_b = (*c.a_runs, *c.a_neighbours), (*c.b_runs, *c.b_neighbours)
    out = {}
    for la in lrs_a:
        for lb in lrs_b:
            d, _ = paired_difference([r for r in runs_a if r.lr == la], [r for r in runs_b if r.lr == lb])
            if d.mean is not None:
                out[(la, lb)] = d
    return out


def pairs_check(c: Comparison, side: Side | None = None) -> tuple[str, list[str]]:
    """LR_ROBUST when b − a on the judged seeds keeps the best-vs-best side of the threshold (`side`; the sign by
    default) at every pair of judged lrs (each side's chosen lr and its neighbours: up to 3 × 3), else
    LR_DEPENDENT; one line that shows every pair."""
    side = side or _sign
    cells, agree = [], True
    for (la, lb), d in judged_pairs(c).items():
        agree &= side(d.mean) == side(c.diff.mean)
        cells.append(f"{c.a} {la:g} / {c.b} {lb:g}: {fmt_interval(d)}")
    label = LR_ROBUST if agree else LR_DEPENDENT
    return label, [f"  - {label} across the judged lrs ({c.b} − {c.a} on the judged seeds, each pair of a side's "
                   f"chosen lr and its neighbours): " + "; ".join(cells)
                   + ("" if agree else " — some pair falls on the other side of the rule's threshold")]


def _lr_label(c: Comparison, side: Side) -> tuple[str | None, list[str]]:
    """The lr check of `c`: across its judged lrs where both sides have neighbour runs, else on the tuning seeds.
    Where one side alone was judged at its neighbours, its judged pairs are checked as well: they test that side's
    lr choice on fresh seeds, the tuning seeds the other's, and either check failing makes `c` lr-dependent."""
    if _lr_checkable(c) and c.a_neighbours and c.b_neighbours:
        return pairs_check(c, side)
    label, lines = lr_check(c, side)
    if _lr_checkable(c) and (c.a_neighbours or c.b_neighbours):
        one_side, more = pairs_check(c, side)
        lines = [*lines, *more]
        label = LR_DEPENDENT if one_side == LR_DEPENDENT else label
    return label, lines


def _judged_verdict(c: Comparison, rule: Rule, side: Side, unit: Unit = NATS) -> Verdict:
    """A comparison's verdict with its own lr check and, where it has neighbour runs, its nested interval: what the
    init, length and size checks compare across their cells."""
    v = rule(nested(c, unit) or c)
    label, _ = _lr_label(c, side)
    if label == LR_DEPENDENT and v.verdict in DECIDED:
        return Verdict(INCONCLUSIVE, f"{LR_DEPENDENT} (would be {v.verdict})")
    return v


def plateau_rates(tuning: tuple, lr: float) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(plateaued, seeds) among the tuning runs at `lr` and at the next lr above it that they tried; None where no
    tuning run there recorded its instabilities."""
    def rate(at: float):
        runs = [r for r in tuning if r.lr == at and r.result.instabilities is not None]
        if not runs:
            return None
        return sum(any(i.get("kind") == "plateau" for i in r.result.instabilities) for r in runs), len(runs)

    above = sorted(r.lr for r in tuning if r.lr > lr)
    return rate(lr), (rate(above[0]) if above else None)


def grid_shape(tuning: tuple) -> tuple[int, int]:
    """(lrs, seeds per lr, the fewest) of a side's tuning grid."""
    lrs = {r.lr for r in tuning}
    return len(lrs), min((len({r.seed for r in tuning if r.lr == lr}) for lr in lrs), default=0)


def _agreement(out: Robustness, best: Comparison, other: Comparison, rule: Rule, side: Side, what: str,
               labels: tuple[str, str, str], where: Callable[[Comparison], str], unit: Unit = NATS) -> None:
    """A factor checked by the same decided verdict in another cell (init, size): labels (robust, dependent, what
    disagrees), the line that shows both cells (`where` names a cell), and the downgrade when they disagree."""
    robust, dependent, subject = labels
    mine, theirs = _judged_verdict(best, rule, side, unit), _judged_verdict(other, rule, side, unit)
    same = mine.verdict == theirs.verdict  # a decided verdict stands only where the other cell decides alike
    out.labels.append(robust if same else dependent)
    out.lines.append(f"  - {robust if same else dependent}: {what} at {where(other)} ({other.lr}) = "
                     f"{_shown(other, unit)} (n = {other.n}): {_said(theirs)}, against "
                     f"{_said(mine)} at {where(best)}")
    if not same:
        out.downgrade(f"inconclusive ({dependent})", f"{subject} disagree ({mine.verdict} at {where(best)}, "
                                                     f"{theirs.verdict} at {where(other)})")


def _said(v: Verdict) -> str:
    """A cell's verdict as a check line names it: with its lr check's reading where that undecided it (the interval
    shown beside it would otherwise read as decided)."""
    return f"{v.verdict} ({v.reason})" if v.reason.startswith(LR_DEPENDENT) else v.verdict


def _shown(c: Comparison, unit: Unit) -> str:
    """The interval a cell's verdict reads, in the rule's unit: the nested one where the cell has one."""
    wide = nested(c, unit)
    return fmt_interval(wide.diff if wide is not None else judged_only(c, unit), unit=unit.name)


def check(best: Comparison, comps: list[Comparison], rule: Rule, what: str, side: Side | None = None,
          unit: Unit = NATS) -> Robustness:
    """Every check of the module docstring on the deciding comparison `best`, among all of a claim's comparisons
    `comps` (the other settings it ran in); `rule` gives a comparison's verdict, and `side` which side of its
    threshold a difference falls on (the sign for "better" rules; C7's margin for its non-inferiority), which the lr
    and length checks compare. The verdict reads the nested interval, in `unit` (C7: bits per byte), where neighbour
    runs exist: a rule reads a comparison's `interval` when it has one."""
    side = side or _sign
    wide = nested(best, unit)
    out = Robustness(rule(wide or best), deciding=wide or best)
    if wide is not None:
        shown, alone = fmt_interval(wide.diff, unit=unit.name), fmt_interval(judged_only(best, unit), unit=unit.name)
        out.lines.append(f"  - interval with the lr choice ({wide.interval[1]}): {shown}, against {alone} on the "
                         "judged seeds at the chosen lrs alone")
    # lr
    label, lines = _lr_label(best, side)
    out.lines += lines
    unchecked: list[str] = []
    if label is None:
        out.unchecked.append("lr (no tuned, fresh-seed comparison with shared-lr tuning runs)")
        unchecked.append("lr")
    else:
        out.checked.append("lr")
        out.labels.append(label)
        if not (best.a_neighbours and best.b_neighbours):
            out.labels.append(LR_ONE_SIDE if best.a_neighbours or best.b_neighbours else LR_TUNING_ONLY)
        if label == LR_DEPENDENT:
            out.downgrade("inconclusive (lr-dependent)", "the differences at other lrs have the other sign")
    edges = bracket_check(best)
    if edges:
        out.labels.append(NOT_BRACKETED)
        out.lines.append(f"  - {NOT_BRACKETED}: {'; '.join(edges)}")
    if best.best_lr and best.protocol == FRESH_SEEDS:
        shapes = {name: grid_shape(t) for name, t in ((best.a, best.a_tuning), (best.b, best.b_tuning)) if t}
        thin = {n: sh for n, sh in shapes.items() if sh[0] < ROBUST_MIN_LRS or sh[1] < ROBUST_MIN_SEEDS}
        if thin:
            out.labels.append(REDUCED_GRID)
            out.lines.append(f"  - {REDUCED_GRID}: " + "; ".join(f"{n}: {k} lrs × {m} tuning seeds" for n, (k, m)
                                                                in thin.items())
                             + f" (the full protocol: ≥ {ROBUST_MIN_LRS} × ≥ {ROBUST_MIN_SEEDS})")
        edge_lines = []
        for name, tuning, judged in ((best.a, best.a_tuning, best.a_runs), (best.b, best.b_tuning, best.b_runs)):
            at, above = plateau_rates(tuning, judged[0].lr)
            if above is not None and above[0] > 0:
                edge_lines.append(f"{name}: plateaued on {at[0] if at else '?'} of {at[1] if at else '?'} tuning "
                                  f"seeds at its chosen lr {judged[0].lr:g}, {above[0]} of {above[1]} at the next "
                                  "lr above")
        if edge_lines:
            out.labels.append(PLATEAU_EDGE)
            out.lines.append(f"  - {PLATEAU_EDGE} (the lr above the chosen one plateaus: the difference measures "
                             f"whether a run escapes the early plateau): {'; '.join(edge_lines)}")
    # init
    other = _partner(comps, best, INIT_FACTORS)
    if other is None:
        out.unchecked.append("init (no runs under the other model.init)")
        unchecked.append("init")
    else:
        out.checked.append("init")
        _agreement(out, best, other, rule, side, what, (INIT_ROBUST, INIT_DEPENDENT, "the inits"),
                   lambda c: f"model.init={init_name(c.key.setting)}", unit)
    # length: the 4× interval must give the same decided verdict; the point estimates only name the trend
    base_tokens = best.key.factor("trainer.tokens_per_param")
    tokens = "trainer.tokens_per_param"
    longer = None if base_tokens is None else _partner(
        comps, best, (tokens,), lambda c: c.key.factor(tokens) == base_tokens * LONGER)
    if longer is None or longer.diff.mean is None or best.diff.mean is None:
        out.unchecked.append(f"training length (no runs at {LONGER}× the tokens)")
        unchecked.append("length")
    else:
        out.checked.append("training length")
        d1, d4 = best.diff.mean, longer.diff.mean
        mine, theirs = _judged_verdict(best, rule, side, unit), _judged_verdict(longer, rule, side, unit)
        flipped = side(d1) != side(d4)
        shrunk = abs(d4) < abs(d1) / 2
        label = EARLY if flipped or shrunk else LENGTH_ROBUST
        out.labels.append(label)
        how = "changes side" if flipped else ("shrinks by more than half" if shrunk else "holds")
        out.lines.append(f"  - {label}: {what} at {base_tokens * LONGER:g} tokens/param ({longer.lr}) = "
                         f"{_shown(longer, unit)} (n = {longer.n}): {theirs.verdict}, "
                         f"against {d1:+.3f} ({mine.verdict}) at {base_tokens:g}: the effect {how}")
        if mine.verdict != theirs.verdict:
            out.downgrade("inconclusive (early-training)", f"at {base_tokens * LONGER:g} tokens per parameter the "
                                                           f"verdict is {theirs.verdict}, at {base_tokens:g} "
                                                           f"{mine.verdict}")
    # size: where the sweep ran this comparison at a second size, it must agree; the stability options are shown
    size = _partner(comps, best, ("model.name", "model.d_model"))
    if size is not None:
        out.checked.append("size")
        _agreement(out, best, size, rule, side, what, (SIZE_ROBUST, SIZE_DEPENDENT, "the sizes"),
                   lambda c: f"d_model {c.key.factor('model.d_model')}", unit)
    stable = _partner(comps, best, ("model.qk_norm", "optim.z_loss"), lambda c: bool(c.key.factor("model.qk_norm")))
    if stable is not None:
        out.lines.append(f"  - with qk-norm and z-loss {stable.key.factor('optim.z_loss'):g} ({stable.lr}): {what} "
                         f"= {fmt_interval(stable.diff)} (n = {stable.n}), {rule(stable).verdict}; shown, not "
                         "deciding")
    # a check that never ran does not pass: the claim's verdict is decided only where every factor ran and agrees
    # (claim.evaluate_claim undecides it); the verdict here is the reading where it ran
    if unchecked:
        out.missing = unchecked
        out.labels.append(f"{', '.join(unchecked)} unchecked")
    return out


# A part read off one setting (a fraction, not a paired difference: C5, C6) is checked by reading it again in the
# cells that vary one factor; lr, init and length must have run (unchecked otherwise), size is checked where it ran.
CELL_FACTORS = {"lr": (LR_ROBUST, LR_DEPENDENT), "init": (INIT_ROBUST, INIT_DEPENDENT),
                "length": (LENGTH_ROBUST, EARLY), "size": (SIZE_ROBUST, SIZE_DEPENDENT)}
REQUIRED_FACTORS = ("lr", "init", "length")


def other_cells(key: PairKey, keys: Iterable[PairKey]) -> dict[str, list[PairKey]]:
    """The settings among `keys` that vary one factor of `key`'s (the rest, budget and bias held): another
    model.init, LONGER× the tokens per parameter, another size (model.name / d_model)."""
    factors = {"init": INIT_FACTORS, "length": ("trainer.tokens_per_param",),
               "size": ("model.name", "model.d_model")}
    mine = dict(key.setting)
    out: dict[str, list[PairKey]] = {f: [] for f in factors}
    for k in keys:
        if k == key or dataclasses.replace(k, setting=()) != dataclasses.replace(key, setting=()):
            continue
        theirs = dict(k.setting)
        for factor, names in factors.items():
            if any(theirs.get(n) != mine.get(n) for n in names) and \
                    all(theirs.get(n) == v for n, v in mine.items() if n not in names) and set(theirs) == set(mine):
                if factor == "length" and (mine.get(names[0]) is None
                                           or theirs.get(names[0]) != mine[names[0]] * LONGER):
                    continue
                out[factor].append(k)
    return out


def cell_check(verdict: Verdict, where: str, cells: dict[str, list[tuple[str, Verdict]]],
               inherent: tuple[str, ...] = ()) -> Robustness:
    """A part's verdict in its deciding cell (`where`), checked against the same part read in the cells that vary
    one factor (`cells`: factor → [(the cell in words, its verdict)]), as the init and size checks of `check` do:
    a decided verdict stands only where every other cell gives the same verdict; otherwise it becomes inconclusive
    (X-dependent). A factor of REQUIRED_FACTORS with no cell is unchecked (Robustness.missing), unless the part
    varies it itself (`inherent`: C6 reads every lr, C5's GELU part is one part per init)."""
    out = Robustness(verdict)
    for factor, (robust, dependent) in CELL_FACTORS.items():
        others = cells.get(factor) or []
        if factor in inherent:
            out.checked.append(factor)
            continue
        if not others:
            if factor in REQUIRED_FACTORS:
                out.unchecked.append(f"{factor} (no runs vary it)")
                out.missing.append(factor)
            continue
        out.checked.append(factor)
        differ = [(w, v) for w, v in others if v.verdict != verdict.verdict]
        out.labels.append(dependent if differ else robust)
        out.lines.append(f"  - {dependent if differ else robust}: {verdict.verdict} at {where}; "
                         + "; ".join(f"{v.verdict} at {w} ({v.reason})" for w, v in others))
        if differ:
            out.downgrade(f"inconclusive ({dependent})", "; ".join(f"{v.verdict} at {w}" for w, v in differ)
                          + f", {verdict.verdict} at {where}")
    if out.missing:
        out.labels.append(f"{', '.join(out.missing)} unchecked")
    return out


def verdict_rule(rule: Callable[[Paired], Verdict] = verdict_better, b_worse_supports: bool = True) -> Rule:
    """A Rule (a comparison → its verdict) from a rule on the paired difference and its direction."""
    return lambda c: c.verdict(rule, b_worse_supports)


