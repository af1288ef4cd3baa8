"""The lr's share of the robustness checks (claims.robust): the nested interval that includes the lr choice, the
differences at every pair of judged lrs, the tuning seeds' shared-lr check, and the grid's labels (optimum not
bracketed, reduced grid, plateau-edge). The lr is counted once: where both sides were judged at their chosen lr's
neighbours the nested interval decides and the pairs only label; otherwise the tuning seeds' check can undecide."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.lr_protocol import ROBUST_MIN_LRS, ROBUST_MIN_SEEDS, bracketing
from ffnbench.claims.pairing import FRESH_SEEDS, Comparison, paired_difference, shared_lr_differences, window_losses
from ffnbench.claims.runs import Run, outcomes_by_seed, run_by_seed
from ffnbench.stats.bootstrap import NestedSide, hull, nested_lr_contrast
from ffnbench.stats.intervals import Paired

LR_ROBUST, LR_DEPENDENT, LR_SENSITIVE = "lr-robust", "lr-dependent", "lr-sensitive"
LR_TUNING_ONLY = "lr checked on tuning seeds only"  # no neighbour runs: the sign test on the tuning seeds
PLATEAU_EDGE = "plateau-edge"
REDUCED_GRID = "reduced grid"
NOT_BRACKETED = "optimum not bracketed"
WITHHELD = ("no nested interval: over 2.5% of its resamples choose lrs without a judged contrast "
            "(a seed diverged on one side there, or too few seeds in common)")
NESTED = "nested bootstrap: tuning seeds resampled and each lr chosen again among its judged lrs, then judged seeds"
Side = Callable[[float], int]  # a difference (nats) → the side of the rule's threshold it falls on: −1, 0 or +1


@dataclass(frozen=True)
class Unit:
    """The unit a rule reads its difference in, from a run's nats per token: `per_nat(run)` times its loss (C7's
    bits per byte: each run's final_val_bpb / final_val_loss). The nested interval is built in it."""

    name: str
    per_nat: Callable[[Run], float]


NATS = Unit("nats", lambda r: 1.0)


def sign(x: float | None) -> int:
    """The side of 0 a difference falls on: what the lr checks of a sign rule compare."""
    return 0 if not x else int(math.copysign(1, x))


def _lr_checkable(c: Comparison) -> bool:
    """Whether `c` is best-vs-best on fresh seeds with a difference: what any check of its lr choice needs."""
    return bool(c.best_lr) and c.protocol == FRESH_SEEDS and c.diff.mean is not None


def both_neighbours(c: Comparison) -> bool:
    """Whether both sides of `c` were judged at their chosen lr's neighbours too: the nested interval decides."""
    return _lr_checkable(c) and bool(c.a_neighbours) and bool(c.b_neighbours)


def shared_lr(c: Comparison) -> dict[float, Paired]:
    """b − a on the tuning seeds both sides finished, at each lr both tried (pairing.shared_lr_differences)."""
    return shared_lr_differences(c.a_tuning, c.b_tuning)


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
    side = side or sign
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


def _tuning_losses(runs) -> dict[float, dict[int, float]]:
    """{lr: {tuning seed: final loss in nats, +inf where it diverged}}: what the protocol chose each lr on."""
    out: dict[float, dict[int, float]] = {}
    for lr in sorted({r.lr for r in runs}):
        at = outcomes_by_seed(r for r in runs if r.lr == lr)
        out[lr] = {s: (math.inf if r.diverged else r.loss) for s, r in at.items()}
    return out


def _judged_windows(runs, unit: Unit) -> dict[float, dict[int, list[float]]]:
    """{lr: {judged seed: its per-window validation losses in `unit` (its final loss where it has no windows)}}; an
    lr whose judged runs all diverged maps to no seeds (the seeds that diverged: _diverged_seeds)."""
    out: dict[float, dict[int, list[float]]] = {}
    for lr in sorted({r.lr for r in runs}):
        out[lr] = {}
        for s, r in run_by_seed(x for x in runs if x.lr == lr).items():
            w = window_losses(r)
            out[lr][s] = list(w * unit.per_nat(r)) if w is not None else [r.loss * unit.per_nat(r)]
    return out


def _diverged_seeds(runs) -> dict[float, frozenset[int]]:
    """{lr: the judged seeds whose run diverged there}: a combination of lrs where a seed diverged on one side only
    has no contrast in the nested bootstrap (stats.bootstrap.nested_lr_contrast)."""
    return {lr: frozenset(s for s, r in outcomes_by_seed(x for x in runs if x.lr == lr).items() if r.diverged)
            for lr in sorted({r.lr for r in runs})}


def _sides(c: Comparison, unit: Unit, sign_: float) -> list[NestedSide]:
    """c's two tuned sides as terms of a contrast: sign_ · (b − a)."""
    a, b = (*c.a_runs, *c.a_neighbours), (*c.b_runs, *c.b_neighbours)
    return [NestedSide(_tuning_losses(c.a_tuning), _judged_windows(a, unit), c.a_runs[0].lr, -sign_,
                       _diverged_seeds(a)),
            NestedSide(_tuning_losses(c.b_tuning), _judged_windows(b, unit), c.b_runs[0].lr, sign_,
                       _diverged_seeds(b))]


@functools.lru_cache(maxsize=1024)  # a Comparison is hashed by identity; check(), the regime and a figure ask alike
def nested(c: Comparison, unit: Unit = NATS) -> Comparison | None:
    """`c` with the interval that includes the lr choice (stats.bootstrap.nested_lr_contrast, widened to contain
    the judged-only interval), in `unit`, where both sides were judged at a neighbour of their chosen lr too; None
    otherwise (records without neighbour runs: the verdict keeps the judged seeds' interval, and the lr check falls
    back to the tuning seeds). The lr is chosen again on the tuning runs' losses in nats, as the protocol chose it."""
    if not both_neighbours(c):
        return None
    paired = nested_lr_contrast(_sides(c, unit, 1.0))
    if paired is None:
        return None
    return dataclasses.replace(c, interval=(hull(paired, judged_only(c, unit)),
                                            NESTED + ("" if unit is NATS else f", in {unit.name}") + kept(paired)))


def kept(paired: Paired) -> str:
    """How often the nested bootstrap's resamples chose the estimate's lrs again: with 3 tuning seeds the median's
    resamples are few, and a low share says the lr choice moves the interval."""
    return "" if paired.kept is None else f"; the chosen lrs re-chosen in {paired.kept:.0%} of resamples"


def nested_interaction(first: Comparison, second: Comparison, judged: Paired) -> Paired | None:
    """(b − a) in `second` minus (b − a) in `first` (C8's depth interaction) with all four lr choices inside the
    interval (stats.bootstrap.nested_lr_contrast), widened to contain `judged`, the judged seeds' interval at the
    chosen lrs; None unless every side was judged at its chosen lr's neighbours too."""
    if not (both_neighbours(first) and both_neighbours(second)):
        return None
    paired = nested_lr_contrast([*_sides(first, NATS, -1.0), *_sides(second, NATS, 1.0)])
    return None if paired is None else hull(paired, judged)


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
    default) at every pair of judged lrs (each side's chosen lr and its neighbours: up to 3 × 3), else LR_SENSITIVE
    (a label: the nested interval has already counted the lr choice); one line that shows every pair."""
    side = side or sign
    cells, agree = [], True
    for (la, lb), d in judged_pairs(c).items():
        agree &= side(d.mean) == side(c.diff.mean)
        cells.append(f"{c.a} {la:g} / {c.b} {lb:g}: {fmt_interval(d)}")
    label = LR_ROBUST if agree else LR_SENSITIVE
    return label, [f"  - {label} across the judged lrs ({c.b} − {c.a} on the judged seeds, each pair of a side's "
                   f"chosen lr and its neighbours): " + "; ".join(cells)
                   + ("" if agree else " — some pair falls on the other side of the rule's threshold (a label: the "
                                       "interval already includes the lr choice)")]


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


def lr_and_grid(out, best: Comparison, side: Side) -> None:
    """The lr check of a deciding comparison and its grid's labels, into `out` (a robust.Robustness): the pairs of
    judged lrs label it where its nested interval counted the lr choice, else the tuning seeds check it."""
    both = nested(best) is not None
    label, lines = pairs_check(best, side) if both else lr_check(best, side)
    if both_neighbours(best) and not both:
        out.lines.append(f"  - {WITHHELD}: the lr is checked on the tuning seeds")
    out.lines += lines
    if label is None:
        out.unrun("lr", "no tuned, fresh-seed comparison with shared-lr tuning runs")
    else:
        out.checked.append("lr")
        out.labels += [label] if both else [label, LR_TUNING_ONLY]
        if label == LR_DEPENDENT:
            out.downgrade(f"inconclusive ({LR_DEPENDENT})", "the differences at other lrs have the other sign")
    edges = bracket_check(best)
    if edges:
        out.labels.append(NOT_BRACKETED)
        out.lines.append(f"  - {NOT_BRACKETED}: {'; '.join(edges)}")
    if not (best.best_lr and best.protocol == FRESH_SEEDS):
        return
    shapes = {name: grid_shape(t) for name, t in ((best.a, best.a_tuning), (best.b, best.b_tuning)) if t}
    thin = {n: sh for n, sh in shapes.items() if sh[0] < ROBUST_MIN_LRS or sh[1] < ROBUST_MIN_SEEDS}
    if thin:
        out.labels.append(REDUCED_GRID)
        out.lines.append(f"  - {REDUCED_GRID}: " + "; ".join(f"{n}: {k} lrs × {m} tuning seeds" for n, (k, m)
                                                            in thin.items())
                         + f" (the full protocol: ≥ {ROBUST_MIN_LRS} × ≥ {ROBUST_MIN_SEEDS})")
    edge_lines = []
    for name, tuning, judged_runs in ((best.a, best.a_tuning, best.a_runs), (best.b, best.b_tuning, best.b_runs)):
        at, above = plateau_rates(tuning, judged_runs[0].lr)
        if above is not None and above[0] > 0:
            edge_lines.append(f"{name}: plateaued on {at[0] if at else '?'} of {at[1] if at else '?'} tuning "
                              f"seeds at its chosen lr {judged_runs[0].lr:g}, {above[0]} of {above[1]} at the next "
                              "lr above")
    if edge_lines:
        out.labels.append(PLATEAU_EDGE)
        out.lines.append(f"  - {PLATEAU_EDGE} (the lr above the chosen one plateaus: the difference measures "
                         f"whether a run escapes the early plateau): {'; '.join(edge_lines)}")
