"""Pairing runs for a comparison: the key that says what was held fixed, and the comparison of two sides
that differ only in the factor under test (b − a, paired by seed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ffnbench import stats
from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.runs import Run, Setting, by_seed, describe_setting, group_by, setting_without, summary_of
from ffnbench.stats import INCONCLUSIVE, Paired, Verdict


@dataclass(frozen=True)
class PairKey:
    """What two sides of a comparison share. A factor left None is not held fixed: it is the one under test
    (the activation of a matched comparison, the bias of C7's). Field order is the order `describe` and the
    tie-break in `primary` use."""

    setting: Setting
    act: str | None = None
    budget: float | None = None  # the ungated width ratio whose parameter count both sides have
    bias: bool | None = None
    multiple_of: int = 1

    def factor(self, name: str) -> Any:
        """One model factor of the setting, e.g. key.factor("model.n_layer")."""
        return dict(self.setting)[name]

    def describe(self) -> str:
        """What was held fixed, in words."""
        words = [describe_setting(self.setting)]
        if self.act is not None:
            words.append(f"act {self.act}")
        if self.budget is not None:
            words.append(f"budget {self.budget:g}× (params of a {self.budget:g}·d ungated FFN)")
        if self.bias is not None:
            words.append("FFN bias" if self.bias else "no FFN bias")
        if self.multiple_of != 1:
            words.append(f"d_ff multiple of {self.multiple_of}")
        return ", ".join(words)


def matched_key(r: Run) -> PairKey | None:
    """Everything but the variant and the lr held fixed, at a matched parameter budget (None: a gated FFN
    sized by width, which matches no budget)."""
    if r.budget_ratio is None:
        return None
    return PairKey(r.setting, budget=r.budget_ratio, bias=r.bias, multiple_of=r.multiple_of)


def act_is(name: str) -> Callable[[Run], bool]:
    return lambda r: r.act == name


@dataclass(frozen=True, eq=False)
class Comparison:
    """b − a between two sets of runs that differ only in the factor under test (paired by seed)."""

    a: str
    b: str
    key: PairKey
    lr: str  # "lr 0.001" or "each at its best lr (...)"
    best_lr: bool
    a_runs: tuple[Run, ...]
    b_runs: tuple[Run, ...]

    @cached_property
    def diff(self) -> Paired:
        return stats.compare(by_seed(self.a_runs), by_seed(self.b_runs))

    @property
    def where(self) -> str:
        return f"{self.key.describe()}, {self.lr}"

    @cached_property
    def seed_diffs(self) -> dict[int, float]:
        """b − a per seed that both sides ran."""
        a, b = by_seed(self.a_runs), by_seed(self.b_runs)
        return {s: b[s] - a[s] for s in set(a) & set(b)}

    def verdict(self, rule: Callable[[Paired], Verdict] = stats.verdict_better) -> Verdict:
        """`rule` applied to b − a, once the budgets are known to be matched (inconclusive otherwise)."""
        problem = self.budget_problem()
        return Verdict(INCONCLUSIVE, problem) if problem else rule(self.diff)

    def budget_problem(self) -> str | None:
        """A matched comparison is only as good as its match: a budget-sized FFN whose rounded d_ff misses
        its budget by more than ffn.max_mismatch does not have the other side's parameter count."""
        for r in (*self.a_runs, *self.b_runs):
            if r.sizing == "budget" and abs(r.budget_mismatch) > r.max_mismatch:
                return (f"budget not matched: {r.label} (d_ff {r.d_ff}) misses its budget by "
                        f"{r.budget_mismatch:+.2%}, beyond ffn.max_mismatch={r.max_mismatch:g}")
        return None

    def line(self, what: str, deciding: bool = False) -> str:
        """The comparison as one markdown list item of a claim's numbers."""
        mark = " ← decides the verdict" if deciding else ""
        return f"- {what}, {self.where}: {fmt_interval(self.diff)} (n = {self.diff.n}){mark}"


def best_lr(runs: list[Run]) -> float:
    """The lr with the lowest mean final loss (chosen on the loss it is then compared on: a mild optimism
    that both sides of a comparison share)."""
    means = {lr: summary_of([r for r in runs if r.lr == lr]).mean for lr in {r.lr for r in runs if r.usable}}
    return min(means, key=lambda lr: (means[lr], lr))


def compare_sides(runs: Iterable[Run], a: Callable[[Run], bool], b: Callable[[Run], bool],
                  key: Callable[[Run], Hashable | None], names: tuple[str, str]) -> list[Comparison]:
    """One comparison per setting (key) and lr where both sides have usable runs; and where both sides ran at
    two or more lrs, one more with each side at its own best lr, so that neither is judged at an lr that
    happens to suit the other."""
    groups = group_by((r for r in runs if a(r) or b(r)), key)
    groups.pop(None, None)  # runs outside every setting of this comparison
    out = []
    for k, group in groups.items():
        side_a, side_b = [r for r in group if a(r)], [r for r in group if b(r)]
        lrs_a, lrs_b = {r.lr for r in side_a if r.usable}, {r.lr for r in side_b if r.usable}
        for lr in sorted(lrs_a & lrs_b):
            out.append(Comparison(a=names[0], b=names[1], key=k, lr=f"lr {lr:g}", best_lr=False,
                                  a_runs=tuple(r for r in side_a if r.lr == lr),
                                  b_runs=tuple(r for r in side_b if r.lr == lr)))
        if len(lrs_a) >= 2 and len(lrs_b) >= 2:
            la, lb = best_lr(side_a), best_lr(side_b)
            out.append(Comparison(a=names[0], b=names[1], key=k, best_lr=True,
                                  lr=f"each at its best lr ({names[0]} {la:g}, {names[1]} {lb:g})",
                                  a_runs=tuple(r for r in side_a if r.lr == la),
                                  b_runs=tuple(r for r in side_b if r.lr == lb)))
    return out


def primary(comps: list[Comparison], base: Setting | None) -> Comparison | None:
    """The comparison that decides a verdict: the most paired seeds; then each side at its best lr; then the
    sweep's most common setting; then the textbook setting. The others are shown beside it."""
    if not comps:
        return None
    return min(comps, key=lambda c: (-c.diff.n, not c.best_lr, c.key.setting != base, _textbook_rank(c.key),
                                     repr(c.key), c.lr))  # repr: a last, deterministic tie-break


def _textbook_rank(key: PairKey) -> tuple:
    """Among otherwise equal candidates, the textbook setting: a 4× budget, no FFN bias, no rounding."""
    return (key.budget not in (None, 4), bool(key.bias), key.multiple_of != 1)


def without_factor(key: PairKey, name: str) -> PairKey:
    """The key with one model factor dropped from its setting (to pair comparisons across that factor)."""
    return dataclasses.replace(key, setting=setting_without(key.setting, name))
