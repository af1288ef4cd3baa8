"""Whether a deciding comparison's verdict survives the nuisance choices a reviewer would vary (DESIGN §9):

- **lr**: a best-vs-best difference (each side at its tuned lr, judged on fresh seeds) is *lr-robust* only if the
  paired shared-lr differences on the tuning seeds, at both sides' chosen lrs, have its sign. Otherwise the gap is
  (partly) which lr each side got, and the verdict is *inconclusive (lr-dependent)*.
- **bracketing**: a side whose chosen lr sits at an edge of the lrs its tuning runs tried is named *optimum not
  bracketed* (a better lr may lie beyond: its verdict is kept, and the label says so).
- **init**: the same comparison under the other init convention (model.init), with its own lr protocol. A decided
  verdict stands only if every init gives the same decided verdict; otherwise *inconclusive (init-dependent)*.
- **training length**: the same comparison at 4× the tokens (trainer.tokens_per_param). An effect that shrinks by
  more than half from 1× to 4× is *early-training*; one that changes sign makes the verdict *inconclusive
  (early-training)*.
- **size** and **stability options** (another d_model; qk-norm and z-loss): shown beside it; they do not decide.

Each check says whether it could be made: a label that could not be checked for lack of runs is listed as such."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.pairing import FRESH_SEEDS, Comparison, shared_lr_differences, without_factor
from ffnbench.lr_protocol import bracketing
from ffnbench.stats.intervals import Paired
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict, verdict_better

LR_ROBUST, LR_DEPENDENT = "lr-robust", "lr-dependent"
INIT_ROBUST, INIT_DEPENDENT = "init-robust", "init-dependent"
LENGTH_ROBUST, EARLY = "length-robust", "early-training"
NOT_BRACKETED = "optimum not bracketed"
LONGER = 4  # the length arm: this many times the deciding comparison's tokens per parameter
DECIDED = (SUPPORTED, CONTRADICTED)

Rule = Callable[[Comparison], Verdict]


@dataclass
class Robustness:
    """A deciding comparison's verdict after the checks, its labels, the checks made and not made, and the numbers
    behind them (markdown lines)."""

    verdict: Verdict
    labels: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

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


def lr_check(c: Comparison, side: Side | None = None) -> tuple[str | None, list[str]]:
    """LR_ROBUST, LR_DEPENDENT or None (not checkable), and the lines that show it: the shared-lr differences at
    both chosen lrs beside the best-vs-best one, and across the whole grid."""
    if not c.best_lr or c.protocol != FRESH_SEEDS or c.diff.mean is None:
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


def _lr_verdict(c: Comparison, rule: Rule, side: Side | None = None) -> Verdict:
    """A comparison's verdict with its own lr check (what the init rule compares across inits)."""
    v = rule(c)
    label, _ = lr_check(c, side)
    if label == LR_DEPENDENT and v.verdict in DECIDED:
        return Verdict(INCONCLUSIVE, f"{LR_DEPENDENT} (would be {v.verdict})")
    return v


def check(best: Comparison, comps: list[Comparison], rule: Rule, what: str, side: Side | None = None) -> Robustness:
    """Every check of the module docstring on the deciding comparison `best`, among all of a claim's comparisons
    `comps` (the other settings it ran in); `rule` gives a comparison's verdict, and `side` which side of its
    threshold a difference falls on (the sign for "better" rules; C7's margin for its non-inferiority), which the lr
    and length checks compare."""
    out = Robustness(rule(best))
    side = side or _sign
    # lr
    label, lines = lr_check(best, side)
    out.lines += lines
    if label is None:
        out.unchecked.append("lr (no tuned, fresh-seed comparison with shared-lr tuning runs)")
    else:
        out.checked.append("lr")
        out.labels.append(label)
        if label == LR_DEPENDENT:
            out.downgrade("inconclusive (lr-dependent)", "the shared-lr differences at the chosen lrs have the other "
                                                         "sign")
    edges = bracket_check(best)
    if edges:
        out.labels.append(NOT_BRACKETED)
        out.lines.append(f"  - {NOT_BRACKETED}: {'; '.join(edges)}")
    # init
    other = _partner(comps, best, ("model.init",))
    if other is None:
        out.unchecked.append("init (no runs under the other model.init)")
    else:
        out.checked.append("init")
        mine, theirs = _lr_verdict(best, rule, side), _lr_verdict(other, rule, side)
        same = mine.verdict == theirs.verdict  # a decided verdict stands only where the other init decides alike
        out.labels.append(INIT_ROBUST if same else INIT_DEPENDENT)
        out.lines.append(f"  - {INIT_ROBUST if same else INIT_DEPENDENT}: {what} under model.init="
                         f"{other.key.factor('model.init')} ({other.lr}) = {fmt_interval(other.diff)} (n = "
                         f"{other.n}): {theirs.verdict}, against {mine.verdict} under "
                         f"{best.key.factor('model.init')}")
        if not same:
            out.downgrade("inconclusive (init-dependent)", f"the inits disagree ({mine.verdict} under "
                                                           f"{best.key.factor('model.init')}, {theirs.verdict} under "
                                                           f"{other.key.factor('model.init')})")
    # length
    base_tokens = best.key.factor("trainer.tokens_per_param")
    tokens = "trainer.tokens_per_param"
    longer = None if base_tokens is None else _partner(
        comps, best, (tokens,), lambda c: c.key.factor(tokens) == base_tokens * LONGER)
    if longer is None or longer.diff.mean is None or best.diff.mean is None:
        out.unchecked.append(f"training length (no runs at {LONGER}× the tokens)")
    else:
        out.checked.append("training length")
        d1, d4 = best.diff.mean, longer.diff.mean
        flipped = side(d1) != side(d4)
        shrunk = abs(d4) < abs(d1) / 2
        label = EARLY if flipped or shrunk else LENGTH_ROBUST
        out.labels.append(label)
        how = "changes side" if flipped else ("shrinks by more than half" if shrunk else "holds")
        out.lines.append(f"  - {label}: {what} at {base_tokens * LONGER:g} tokens/param ({longer.lr}) = "
                         f"{fmt_interval(longer.diff)} (n = {longer.n}) against {d1:+.3f} at {base_tokens:g}: the "
                         f"effect {how}")
        if flipped:
            out.downgrade("inconclusive (early-training)", f"the effect changes side from {base_tokens:g} to "
                                                           f"{base_tokens * LONGER:g} tokens per parameter")
    # size and stability options: shown, never deciding
    size = _partner(comps, best, ("model.name", "model.d_model"))
    stable = _partner(comps, best, ("model.qk_norm", "optim.z_loss"), lambda c: bool(c.key.factor("model.qk_norm")))
    for seen, words in ((size, lambda c: f"at d_model {c.key.factor('model.d_model')}"),
                        (stable, lambda c: f"with qk-norm and z-loss {c.key.factor('optim.z_loss'):g}")):
        if seen is not None:
            out.lines.append(f"  - {words(seen)} ({seen.lr}): {what} = {fmt_interval(seen.diff)} (n = {seen.n}), "
                             f"{rule(seen).verdict}; shown, not deciding")
    return out


def verdict_rule(rule: Callable[[Paired], Verdict] = verdict_better, b_worse_supports: bool = True) -> Rule:
    """A Rule (a comparison → its verdict) from a rule on the paired difference and its direction."""
    return lambda c: c.verdict(rule, b_worse_supports)


