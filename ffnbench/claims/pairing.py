"""Pairing runs for a comparison: the key that says what was held fixed, and the comparison of two sides
that differ only in the factor under test (b − a, paired by seed), with the divergence rule (a diverged run
is a failure, see Comparison), the lr protocol that chose each side's lr, and the sign of the difference
along the validation curve."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.lr_protocol import best_lr
from ffnbench.claims.runs import (
    Run,
    Setting,
    by_seed,
    describe_setting,
    group_by,
    is_reference,
    outcomes_by_seed,
    run_by_seed,
    setting_without,
)
from ffnbench.stats.bootstrap import hierarchical_bootstrap
from ffnbench.stats.intervals import Paired, compare
from ffnbench.stats.rates import rate_difference
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict, verdict_better, verdict_rate_lower

BOOTSTRAP = "hierarchical bootstrap over seeds and validation windows"
T_OVER_SEEDS = "t interval over seeds (no per-window validation losses recorded: validation-set noise not included)"


def window_losses(r: Run) -> np.ndarray | None:
    """The run's final validation loss per window (nats/token), or None when it did not record them all finite."""
    windows = r.result.val_windows
    if not windows or r.loss is None:
        return None
    values = np.asarray(windows, dtype=float)
    return values if np.isfinite(values).all() else None


def paired_difference(a_runs: Iterable[Run], b_runs: Iterable[Run],
                      value: Callable[[Run], float | None] = lambda r: r.loss,
                      windows: Callable[[Run], np.ndarray | None] = window_losses) -> tuple[Paired, str]:
    """b − a of `value` over the seeds where both finished, and the noise model of its interval: a hierarchical
    bootstrap over seeds and validation windows (stats.bootstrap) when every paired run recorded
    the same validation windows (`windows`, in the unit of `value`), else the t interval over seeds (Welch when
    the sides share fewer than two seeds, as stats.intervals.compare)."""
    a_runs, b_runs = list(a_runs), list(b_runs)
    a = run_by_seed(a_runs, lambda r: r.usable and value(r) is not None)
    b = run_by_seed(b_runs, lambda r: r.usable and value(r) is not None)
    seeds = sorted(set(a) & set(b))
    pairs = {s: (windows(a[s]), windows(b[s])) for s in seeds}
    if len(seeds) >= 2 and all(wa is not None and wb is not None and len(wa) == len(wb) for wa, wb in pairs.values()):
        return hierarchical_bootstrap({s: wb - wa for s, (wa, wb) in pairs.items()}), BOOTSTRAP
    return compare(by_seed(a_runs, value), by_seed(b_runs, value)), T_OVER_SEEDS


def shared_lr_differences(a_runs: Iterable[Run], b_runs: Iterable[Run]) -> dict[float, Paired]:
    """{lr: b − a of the final loss} at each lr where both variants' tuning runs finished on some shared seed,
    over those seeds only (claims.pairing.paired_difference: a seed × validation-window bootstrap where the runs
    recorded per-window losses, else a t interval over seeds; one seed: a mean, no interval). Runs that are not
    tuning runs are ignored: the tuning seeds are the ones every variant ran at every lr of its grid. A seed
    that diverged on either side is not in the difference (the medians of the grid show the walls). Lrs ascend."""
    a_runs = [r for r in a_runs if r.role == "tuning"]
    b_runs = [r for r in b_runs if r.role == "tuning"]
    out = {}
    for lr in sorted({r.lr for r in a_runs} & {r.lr for r in b_runs}):
        a_at = [r for r in a_runs if r.lr == lr]
        b_at = [r for r in b_runs if r.lr == lr]
        shared = set(by_seed(a_at)) & set(by_seed(b_at))
        if shared:  # restricted to the shared seeds, so it is never an unpaired (Welch) difference
            out[lr] = paired_difference([r for r in a_at if r.seed in shared],
                                        [r for r in b_at if r.seed in shared])[0]
    return out



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


# Reruns of the published quick sweep on a second machine of the same kind (2-core AMD EPYC, torch 2.13.0+cpu)
# gave final losses up to this far from experiments/cpu-quick/results.jsonl; one machine repeats bit for bit.
CROSS_MACHINE_NATS = 0.009
ONE_LR = "one lr"
SAME_SEEDS = "each at its best lr, chosen on the same seeds — optimistic"
FRESH_SEEDS = "lr tuned on tuning seeds, judged on fresh seeds"


def fewer_failures(a: str, k_a: int, n_a: int, b: str, k_b: int, n_b: int, unit: str = "seeds") -> Verdict:
    """"a diverges less often than b", as rates with an exact test (stats.rates.rate_difference, Fisher):
    supported if a's rate is significantly lower, contradicted if significantly higher, inconclusive
    otherwise; the verdict keeps the test's p-value for the claim's Holm correction."""
    v = verdict_rate_lower(rate_difference(k_b, n_b, k_a, n_a))  # its "side b" is our a
    return dataclasses.replace(v, reason=f"{a} diverged on {k_a} of {n_a} {unit}, {b} on {k_b} of {n_b}: {v.reason}")


@dataclass(frozen=True)
class Divergence:
    """The diverged runs of each side of a comparison, counted over the seeds both sides ran (each side's
    own seeds when they share none). `differs`: some seed diverged on one side only."""

    a: str
    b: str
    k_a: int
    n_a: int
    k_b: int
    n_b: int
    differs: bool

    def __str__(self) -> str:
        return f"{self.a} diverged on {self.k_a} of {self.n_a} seeds, {self.b} on {self.k_b}"

    def verdict(self, b_worse_supports: bool = True) -> Verdict:
        """The divergence rule: sides that differ in divergences are inconclusive, unless the difference
        in divergence rates is itself significant (exact test): then the side that diverges less wins.
        `b_worse_supports`: whether b doing worse supports the claim (as in verdict_better on b − a)."""
        v = fewer_failures(self.a, self.k_a, self.n_a, self.b, self.k_b, self.n_b)
        if v.verdict == INCONCLUSIVE:
            return dataclasses.replace(v, reason=f"{v.reason}; the sides differ in divergences, so the loss "
                                                 "difference over the seeds both finished does not decide")
        if not b_worse_supports:
            v = dataclasses.replace(v, verdict=CONTRADICTED if v.verdict == SUPPORTED else SUPPORTED)
        return dataclasses.replace(v, reason=f"decided by divergences: {v.reason}")


@dataclass(frozen=True, eq=False)
class Comparison:
    """b − a between two sets of runs that differ only in the factor under test (paired by seed).

    Divergence rule (every comparison): a diverged run is a failure, never dropped. Over the seeds both
    sides ran, if some seed diverged on one side only, the comparison is inconclusive ("x diverged on k of
    n seeds, y on j") unless the two divergence rates differ significantly (Fisher's exact test), in which
    case the side that diverged less wins; only when the sides diverged on the same seeds is the loss
    difference, over the seeds where both finished, what decides."""

    a: str
    b: str
    key: PairKey
    lr: str  # "lr 0.001" or "each at its best lr (...)"
    best_lr: bool
    a_runs: tuple[Run, ...]
    b_runs: tuple[Run, ...]
    protocol: str = ONE_LR  # how the lr of each side was chosen: ONE_LR, SAME_SEEDS or FRESH_SEEDS
    # each side's tuning runs in this setting (FRESH_SEEDS only): the shared-lr pairs the lr-robust rule reads
    a_tuning: tuple[Run, ...] = ()
    b_tuning: tuple[Run, ...] = ()
    # each side's judged runs at the neighbours of its chosen lr (FRESH_SEEDS, lr_protocol.judge_neighbours)
    a_neighbours: tuple[Run, ...] = ()
    b_neighbours: tuple[Run, ...] = ()
    # (interval, its noise model) in place of the judged seeds' own: claims.robust's nested interval
    interval: tuple[Paired, str] | None = None

    @cached_property
    def _difference(self) -> tuple[Paired, str]:
        return self.interval or paired_difference(self.a_runs, self.b_runs)

    @property
    def diff(self) -> Paired:
        """b − a over the seeds where both finished (what decides when the sides diverged alike), with both
        sources of noise in its interval where the runs recorded per-window validation losses (see `noise`)."""
        return self._difference[0]

    @property
    def noise(self) -> str:
        """The noise model of `diff`'s interval: BOOTSTRAP or T_OVER_SEEDS."""
        return self._difference[1]

    @cached_property
    def divergence(self) -> Divergence:
        out_a, out_b = outcomes_by_seed(self.a_runs), outcomes_by_seed(self.b_runs)
        common = set(out_a) & set(out_b)
        seeds_a, seeds_b = (common, common) if common else (set(out_a), set(out_b))
        div_a = {s for s in seeds_a if out_a[s].diverged}
        div_b = {s for s in seeds_b if out_b[s].diverged}
        return Divergence(self.a, self.b, len(div_a), len(seeds_a), len(div_b), len(seeds_b),
                          differs=div_a != div_b if common else bool(div_a or div_b))

    @property
    def n(self) -> int:
        """The seeds the comparison covers: those both sides ran, diverged or not (the Welch sample size when
        they share fewer than two)."""
        return max(len(set(outcomes_by_seed(self.a_runs)) & set(outcomes_by_seed(self.b_runs))), self.diff.n)

    @property
    def where(self) -> str:
        return f"{self.key.describe()}, {self.lr}"

    @cached_property
    def seed_diffs(self) -> dict[int, float]:
        """b − a per seed where both sides finished."""
        a, b = by_seed(self.a_runs), by_seed(self.b_runs)
        return {s: b[s] - a[s] for s in set(a) & set(b)}

    def verdict(self, rule: Callable[[Paired], Verdict] = verdict_better,
                b_worse_supports: bool = True) -> Verdict:
        """`rule` applied to b − a, once the budgets are known to be matched and the divergence rule (see
        the class) has had its say. `b_worse_supports`: whether a larger b − a supports the claim (True for
        verdict_better; False for a rule like C7's, where a cost to b is what contradicts)."""
        problem = self.budget_problem()
        if problem:
            return Verdict(INCONCLUSIVE, problem)
        if self.divergence.differs:
            return self.divergence.verdict(b_worse_supports)
        return rule(self.diff)

    def budget_problem(self) -> str | None:
        """A matched comparison is only as good as its match: a budget-sized FFN whose rounded d_ff misses
        its budget by more than ffn.max_mismatch does not have the other side's parameter count."""
        for r in (*self.a_runs, *self.b_runs):
            if r.sizing == "budget" and abs(r.budget_mismatch) > r.max_mismatch:
                return (f"budget not matched: {r.label} (d_ff {r.d_ff}) misses its budget by "
                        f"{r.budget_mismatch:+.2%}, beyond ffn.max_mismatch={r.max_mismatch:g}")
        return None

    def sign_along_curve(self) -> tuple[int, int] | None:
        """(checkpoints where the mean paired b − a has the sign of the final one, checkpoints) over the
        validation checkpoints of the second half of training (tokens ≥ half the last shared checkpoint)
        that every paired seed's runs share; None without a paired, nonzero final difference."""
        if not self.diff.mean or not self.diff.seeds:  # Welch pairs no seeds
            return None
        runs_a, runs_b = run_by_seed(self.a_runs), run_by_seed(self.b_runs)
        curves = [(dict(runs_a[s].curve), dict(runs_b[s].curve)) for s in self.diff.seeds]
        shared = set.intersection(*(set(ca) & set(cb) for ca, cb in curves))
        if not shared:
            return None
        late = [t for t in shared if t >= max(shared) / 2]
        sign = math.copysign(1.0, self.diff.mean)
        held = sum(sign * sum(cb[t] - ca[t] for ca, cb in curves) > 0 for t in late)
        return held, len(late)

    def line(self, what: str, deciding: bool = False) -> str:
        """The comparison as one markdown list item of a claim's numbers."""
        mark = " ← decides the verdict" if deciding else ""
        div = self.divergence
        note = f"; {div}" if div.k_a or div.k_b else ""
        return f"- {what}, {self.where}: {fmt_interval(self.diff)} (n = {self.diff.n}{note}){mark}"

    def evidence(self, what: str, deciding: bool = False) -> list[str]:
        """`line`, then as sub-items the lr protocol and whether the sign holds along the validation curve
        (evidence only: neither decides)."""
        sign = self.sign_along_curve()
        held = (f"sign holds at {sign[0]}/{sign[1]} checkpoints of the second half" if sign
                else "sign along the curve: n/a (no paired, nonzero difference with shared checkpoints)")
        lines = [self.line(what, deciding), f"  - lr protocol: {self.protocol}", f"  - {held}",
                 f"  - noise: {self.noise}"]
        if self.diff.mean is not None and abs(self.diff.mean) < CROSS_MACHINE_NATS:
            lines.append(f"  - |difference| below the cross-machine spread of identical runs ({CROSS_MACHINE_NATS:g} "
                         "nats): not a finding on its own")
        return lines


def _lrs(runs: list[Run]) -> tuple[set[float], set[float]]:
    """(lrs with a finished run, lrs with an outcome: finished or diverged)."""
    return {r.lr for r in runs if r.usable}, {r.lr for r in runs if r.usable or r.diverged}


def _best_lr_runs(side: list[Run], tuned: bool) -> tuple[float, tuple[Run, ...]] | None:
    """The side's best lr and the runs judged at it: chosen on the tuning runs and judged on the others when
    the group has tuning runs (as ffnbench.sweep.tuning chose it), else chosen and judged on the same runs. None without
    a finished tuning lr, or, untuned, without two lrs to choose from."""
    pool = [r for r in side if r.role == "tuning"] if tuned else side
    if len(_lrs(pool)[0]) < (1 if tuned else 2):  # tuning runs choose even when one lr finished: make sweep did
        return None
    try:
        lr = best_lr(pool)
    except ValueError:  # half or more of the seeds diverged at every lr: no lr to judge it at
        return None
    return lr, tuple(r for r in side if r.lr == lr and r.role == "judged")


def compare_sides(runs: Iterable[Run], a: Callable[[Run], bool], b: Callable[[Run], bool],
                  key: Callable[[Run], Hashable | None], names: tuple[str, str]) -> list[Comparison]:
    """One comparison per setting (key) and lr where both sides ran (finished or diverged) and one side
    finished; and where both sides ran at two or more lrs, one more with each side at its own best lr
    (best_lr), so that neither is judged at an lr that happens to suit the other. Runs marked tuning
    (Run.role) only choose that lr: they are judged nowhere; judged runs at a neighbour of a side's chosen lr (role
    neighbour) ride along with the best-lr comparison, for claims.robust's nested interval."""
    groups = group_by((r for r in runs if a(r) or b(r)), key)
    groups.pop(None, None)  # runs outside every setting of this comparison
    out = []
    for k, group in groups.items():
        tuned = any(r.role == "tuning" for r in group)
        side_a = [r for r in group if a(r)]
        side_b = [r for r in group if b(r)]
        judged_a, judged_b = ([r for r in side if r.role == "judged"] for side in (side_a, side_b))
        (fin_a, ran_a), (fin_b, ran_b) = _lrs(judged_a), _lrs(judged_b)
        for lr in sorted((ran_a & ran_b) & (fin_a | fin_b)):
            out.append(Comparison(a=names[0], b=names[1], key=k, lr=f"lr {lr:g}", best_lr=False,
                                  a_runs=tuple(r for r in judged_a if r.lr == lr),
                                  b_runs=tuple(r for r in judged_b if r.lr == lr)))
        best_a, best_b = _best_lr_runs(side_a, tuned), _best_lr_runs(side_b, tuned)
        near_a, near_b = ([r for r in side if r.role == "neighbour"] for side in (side_a, side_b))
        if best_a and best_b and best_a[1] and best_b[1]:
            out.append(Comparison(a=names[0], b=names[1], key=k, best_lr=True,
                                  lr=f"each at its best lr ({names[0]} {best_a[0]:g}, {names[1]} {best_b[0]:g})",
                                  a_runs=best_a[1], b_runs=best_b[1], protocol=FRESH_SEEDS if tuned else SAME_SEEDS,
                                  a_tuning=tuple(r for r in side_a if r.role == "tuning"),
                                  b_tuning=tuple(r for r in side_b if r.role == "tuning"),
                                  a_neighbours=tuple(near_a), b_neighbours=tuple(near_b)))
    return out


def primary(comps: list[Comparison], base: Setting | None) -> Comparison | None:
    """The comparison that decides a verdict, pre-registered, so that adding seeds to another comparison cannot
    change which one decides: each side at its tuned lr; in the reference setting (the default nuisance factors:
    GPT-2 init, no qk-norm or z-loss, runs.is_reference) that is the sweep's base setting (its most common
    reference setting, Observations.base_setting); then the textbook setting; then the most paired seeds (only
    between comparisons at fixed lrs of one setting). The others are shown beside it and checked against it
    (claims.robust)."""
    if not comps:
        return None
    return min(comps, key=lambda c: (not c.best_lr, not is_reference(c.key.setting), c.key.setting != base,
                                     textbook_rank(c.key), -c.n, repr(c.key), c.lr))  # repr: a deterministic tie-break


def textbook_rank(key: PairKey) -> tuple:
    """Among otherwise equal candidates, the textbook setting: a 4× budget, no FFN bias, no rounding."""
    return (key.budget not in (None, 4), bool(key.bias), key.multiple_of != 1)


def without_factor(key: PairKey, name: str) -> PairKey:
    """The key with one model factor dropped from its setting (to pair comparisons across that factor)."""
    return dataclasses.replace(key, setting=setting_without(key.setting, name))
