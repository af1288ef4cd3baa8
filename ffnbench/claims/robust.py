"""Whether a deciding comparison's verdict survives the nuisance choices a reviewer would vary (DESIGN §9,
docs/claims.md "the rules every trained comparison shares"):

- **the practice band** (claims.band): the deciding comparison is taken in a setting whose init lies in the band;
  a comparison under an init outside it is a sensitivity check, shown with its label ("reverses at init std 0.16,
  outside practice") and never changing the verdict. With no setting in the band, the verdict is inconclusive.
- **lr, counted once**: where both sides were also judged at their chosen lr's neighbours, the nested interval
  (the lr choice re-made on resampled tuning seeds) decides; b − a at every pair of judged lrs is shown, and a pair
  on the other side of the rule's threshold labels it *lr-sensitive*, not a veto. Without neighbour runs, the
  paired shared-lr differences on the tuning seeds at both chosen lrs must keep its side (else *inconclusive
  (lr-dependent)*).
- **init**: the same comparison under every other in-band init, with its own lr protocol, must give the same
  verdict (else *inconclusive (init-dependent)*); with one in-band init only, init is unchecked.
- **training length**: at 4× the tokens the same verdict (else *inconclusive (early-training)*); an effect that
  shrinks by more than half is labelled early-training.
- **size**: where the sweep ran the comparison at another d_model, the same verdict (else *inconclusive
  (size-dependent)*), compared at matched training tokens where such runs exist (labelled so, or "size confounded
  with tokens").
- **bracketing**, **reduced grid**, **plateau-edge**: labels; the qk-norm/z-loss arm is shown.

A factor no run varied is unchecked, and a claim with an unchecked factor is not decided (claim.evaluate_claim).
`judge` decides one comparison; `check` applies it to the deciding comparison and to each cell that varies one
factor; `cell_check` does the same for a part read off one setting (C5, C6)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ffnbench.claims.band import in_band, outside, preactivation_std
from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.lr_checks import (  # noqa: F401  (nested, pairs_check, judged_pairs: the lr checks' API here too)
    LR_DEPENDENT,
    LR_ROBUST,
    LR_SENSITIVE,
    LR_TUNING_ONLY,
    NATS,
    Side,
    Unit,
    both_neighbours,
    judged_only,
    judged_pairs,
    lr_and_grid,
    lr_check,
    nested,
    pairs_check,
    sign,
)
from ffnbench.claims.margins import margin_nats
from ffnbench.claims.pairing import Comparison, PairKey, without_factor
from ffnbench.claims.runs import INIT_FACTORS, init_name
from ffnbench.stats.intervals import Paired
from ffnbench.stats.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Verdict,
    verdict_beats,
    verdict_better,
)

SIZE_ROBUST, SIZE_DEPENDENT = "size-robust", "size-dependent"
TOKENS_CONFOUNDED = "size confounded with tokens"
INIT_ROBUST, INIT_DEPENDENT = "init-robust", "init-dependent"
LENGTH_ROBUST, EARLY = "length-robust", "early-training"
NO_BAND = "no setting in the practice band"
LONGER = 4  # the length arm: this many times the deciding comparison's tokens per parameter
MATCHED_TOKENS = 0.05  # two runs train matched tokens when their totals differ by at most this fraction
DECIDED = (SUPPORTED, CONTRADICTED)
# The factors a cell varies alone (against the deciding one): their setting keys
FACTORS = {"init": INIT_FACTORS, "length": ("trainer.tokens_per_param",), "size": ("model.name", "model.d_model"),
           "stable": ("model.qk_norm", "optim.z_loss")}

Rule = Callable[[Comparison], Verdict]


@dataclass(frozen=True)
class SideOf:
    """A Side per comparison (`check`'s `side` for the "beats" claims: beats_side at each cell's own outcome row)."""

    of: Callable[[Comparison], Side]

    def __call__(self, c: Comparison) -> Side:
        return self.of(c)


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

    def unrun(self, factor: str, why: str) -> None:
        self.unchecked.append(f"{factor} ({why})")
        self.missing.append(factor)


def judge(c: Comparison, rule: Rule, side: Side, unit: Unit = NATS) -> Verdict:
    """One comparison's verdict, as every check reads it: the rule on its nested interval where it has one (both
    sides judged at their neighbours: the lr choice counted inside it); else on the judged seeds, undecided where the
    tuning seeds' shared-lr differences put the gap on the other side of the threshold (lr-dependent)."""
    wide = nested(c, unit)
    v = rule(wide or c)
    if wide is None and v.verdict in DECIDED and lr_check(c, side)[0] == LR_DEPENDENT:
        return Verdict(INCONCLUSIVE, f"{LR_DEPENDENT} (would be {v.verdict})")
    return v


def vary(key: PairKey, keys: Iterable[PairKey], factor: str) -> list[PairKey]:
    """The settings among `keys` that differ from `key`'s in `factor` alone (FACTORS; budget, bias and the rest
    held); for "length", only LONGER× the tokens per parameter."""
    names = FACTORS[factor]
    mine = dict(key.setting)
    out = []
    for k in keys:
        if k == key or dataclasses.replace(k, setting=()) != dataclasses.replace(key, setting=()):
            continue
        theirs = dict(k.setting)
        if set(theirs) != set(mine) or all(theirs.get(n) == mine.get(n) for n in names) or \
                any(theirs.get(n) != v for n, v in mine.items() if n not in names):
            continue
        tpp = mine.get(names[0])
        if factor == "length" and (tpp is None or theirs.get(names[0]) != tpp * LONGER):
            continue
        out.append(k)
    return out


def other_cells(key: PairKey, keys: Iterable[PairKey]) -> dict[str, list[PairKey]]:
    """vary() for each factor a part read off one setting is checked across (init, length, size), each factor's
    cells in one order whatever order `keys` came in (a set's order follows the hash seed, and the report must
    rebuild byte for byte)."""
    keys = sorted(keys, key=repr)
    return {f: vary(key, keys, f) for f in ("init", "length", "size")}


def _partners(comps: list[Comparison], best: Comparison, factor: str) -> list[Comparison]:
    """The comparisons like `best` but for `factor`, at tuned lrs as `best` is, the most seeds first."""
    keys = set(vary(best.key, [c.key for c in comps], factor))
    found = [c for c in comps if c.key in keys and c.best_lr == best.best_lr and c.protocol == best.protocol
             and (best.best_lr or c.lr == best.lr)]
    return sorted(found, key=lambda c: (-c.n, repr(c.key)))


def tokens(c: Comparison) -> float | None:
    """The training tokens of a comparison's runs (their mean), from their records."""
    trained = [r.result.tokens for r in (*c.a_runs, *c.b_runs) if r.result.tokens]
    return sum(trained) / len(trained) if trained else None


def matched(x: float | None, y: float | None) -> bool:
    return x is not None and y is not None and abs(x - y) <= MATCHED_TOKENS * max(x, y)


def size_pair(comps: list[Comparison], best: Comparison) -> tuple[Comparison, Comparison, bool] | None:
    """The size check's pair: (this size, another size, matched) — a comparison at another d_model and one at this
    d_model that trained the same tokens (within MATCHED_TOKENS; the lengths may differ) where the sweep has such a
    pair, else `best` against the other size at `best`'s length (tokens confounded with size)."""
    others = [c for c in comps if c.best_lr == best.best_lr and c.protocol == best.protocol
              and c.key.factor("model.d_model") != best.key.factor("model.d_model")]
    mine = [best, *_partners(comps, best, "length")]

    def rest(c: Comparison) -> PairKey:  # the key but for its size and length
        return functools.reduce(without_factor, (*FACTORS["size"], *FACTORS["length"]), c.key)

    for other in sorted(others, key=lambda c: (-c.n, repr(c.key))):
        for c in mine:
            if rest(c) == rest(other) and matched(tokens(c), tokens(other)):
                return c, other, True
    plain = _partners(comps, best, "size")
    return (best, plain[0], False) if plain else None


def _said(v: Verdict) -> str:
    """A cell's verdict as a check line names it: with its lr check's reading where that undecided it."""
    return f"{v.verdict} ({v.reason})" if v.reason.startswith(LR_DEPENDENT) else v.verdict


def _read(c: Comparison, unit: Unit) -> Paired:
    """The interval a cell's verdict reads, in `unit`: the nested one where the cell has one."""
    wide = nested(c, unit)
    return wide.diff if wide is not None else judged_only(c, unit)


def _shown(c: Comparison, unit: Unit) -> str:
    return fmt_interval(_read(c, unit), unit=unit.name)


def _init_check(out: Robustness, best: Comparison, others: list[Comparison], mine: Verdict, judged, what: str,
                unit: Unit, side: Side) -> None:
    """Every other init of the comparison: in the band, the same verdict (else init-dependent); outside it, its
    reading with a label (a sensitivity check that never changes the verdict)."""
    inside = [c for c in others if in_band(c.key.setting)]
    for c in others:
        theirs = judged(c)
        where = f"model.init={init_name(c.key.setting)} (init std {preactivation_std(c.key.setting) or 0:.2f})"
        # a reversal is the cell's whole interval (the one its verdict reads) on the other side of the threshold
        # from the deciding estimate, as the init-sensitivity line defines it (activations.init_sensitivity); an
        # estimate that crossed it inside the noise, even in a decided cell ("contradicted": inside ±m), is not one
        iv = _read(c, NATS)
        reverses = iv.has_ci and side(iv.ci_low) == side(iv.ci_high) != side(best.diff.mean or 0)
        if c in inside:
            label = INIT_ROBUST if theirs.verdict == mine.verdict else INIT_DEPENDENT
        else:
            label = f"{'reverses' if reverses else theirs.verdict} at {outside(c.key.setting)}"
        out.labels.append(label)
        out.lines.append(f"  - {label}: {what} at {where} ({c.lr}) = {_shown(c, unit)} (n = {c.n}): {_said(theirs)}, "
                         f"against {_said(mine)} in the deciding setting" + ("" if c in inside else
                                                                             " — shown, not deciding"))
        if c in inside and theirs.verdict != mine.verdict:
            out.downgrade(f"inconclusive ({INIT_DEPENDENT})", f"the inits in the practice band disagree "
                                                               f"({mine.verdict} here, {theirs.verdict} at {where})")
    if not inside:
        out.unrun("init", "one init in the practice band")


def check(best: Comparison, comps: list[Comparison], rule: Rule, what: str, side: Side | SideOf | None = None,
          unit: Unit = NATS) -> Robustness:
    """Every check of the module docstring on the deciding comparison `best`, among all of a claim's comparisons
    `comps` (the other settings it ran in); `rule` gives a comparison's verdict, and `side` which side of its
    threshold a difference falls on (the sign for "better" rules; C7's margin for its non-inferiority), which the lr
    and length checks compare. Every cell is judged alike (judge), in `unit` (C7: bits per byte)."""
    side_of: SideOf = side if isinstance(side, SideOf) else (lambda c, s=side or sign: s)
    side = side_of(best)

    def judged(c: Comparison) -> Verdict:  # each cell's lr check asks what its own outcome-table row asks
        return judge(c, rule, side_of(c), unit)

    wide = nested(best, unit)
    mine = judged(best)
    out = Robustness(rule(wide or best), deciding=wide or best)  # lr_and_grid undecides it where judge() would
    if not in_band(best.key.setting):
        out.labels.append(outside(best.key.setting))
        out.downgrade(f"inconclusive ({NO_BAND})", f"the comparison ran only at {outside(best.key.setting)}")
    if wide is not None:
        shown, alone = fmt_interval(wide.diff, unit=unit.name), fmt_interval(judged_only(best, unit), unit=unit.name)
        out.lines.append(f"  - interval with the lr choice ({wide.interval[1]}): {shown}, against {alone} on the "
                         "judged seeds at the chosen lrs alone")
    lr_and_grid(out, best, side)
    _init_check(out, best, _partners(comps, best, "init"), mine, judged, what, unit, side)
    # length: the 4× interval must give the same verdict; the point estimates only name the trend
    longer = next(iter(_partners(comps, best, "length")), None)
    if longer is None or longer.diff.mean is None or best.diff.mean is None:
        out.unrun("length", f"no runs at {LONGER}× the tokens")
    elif longer.n < 2:  # a campaign's arm under way: one seed has no interval to agree or disagree with
        out.unrun("length", f"one seed at {LONGER}× the tokens so far, no interval")
    else:
        out.checked.append("training length")
        tpp = best.key.factor("trainer.tokens_per_param")
        d1, d4, theirs = best.diff.mean, longer.diff.mean, judged(longer)
        flipped, shrunk = side(d1) != side(d4), abs(d4) < abs(d1) / 2
        label = EARLY if flipped or shrunk else LENGTH_ROBUST
        out.labels.append(label)
        how = "changes side" if flipped else ("shrinks by more than half" if shrunk else "holds")
        out.lines.append(f"  - {label}: {what} at {tpp * LONGER:g} tokens/param ({longer.lr}) = "
                         f"{_shown(longer, unit)} (n = {longer.n}): {theirs.verdict}, "
                         f"against {d1:+.3f} ({mine.verdict}) at {tpp:g}: the effect {how}")
        if mine.verdict != theirs.verdict:
            out.downgrade(f"inconclusive ({EARLY})", f"at {tpp * LONGER:g} tokens per parameter the verdict is "
                                                     f"{theirs.verdict}, at {tpp:g} {mine.verdict}")
    pair = size_pair(comps, best)
    if pair is not None:
        here, there, same_tokens = pair
        out.checked.append("size")
        v_here, v_there = judged(here), judged(there)
        label = SIZE_ROBUST if v_here.verdict == v_there.verdict else SIZE_DEPENDENT
        out.labels += [label] + ([] if same_tokens else [TOKENS_CONFOUNDED])
        how = (f"at matched tokens ({(tokens(there) or 0) / 1e6:.2f}M)" if same_tokens else
               f"at {(tokens(here) or 0) / 1e6:.2f}M against {(tokens(there) or 0) / 1e6:.2f}M tokens: "
               f"{TOKENS_CONFOUNDED}")
        out.lines.append(f"  - {label} {how}: {what} at d_model {there.key.factor('model.d_model')} ({there.lr}) = "
                         f"{_shown(there, unit)} (n = {there.n}): {_said(v_there)}, against {_shown(here, unit)} "
                         f"({_said(v_here)}) at d_model {here.key.factor('model.d_model')}")
        if not in_band(there.key.setting):  # a sensitivity check, as an init outside the band is
            out.labels[-1 - (not same_tokens)] = f"{v_there.verdict} at d_model {there.key.factor('model.d_model')}, " \
                                                 f"{outside(there.key.setting)}"
        elif v_here.verdict != v_there.verdict:
            out.downgrade(f"inconclusive ({SIZE_DEPENDENT})", f"the sizes disagree ({v_here.verdict} at d_model "
                                                             f"{here.key.factor('model.d_model')}, {v_there.verdict} "
                                                             f"at d_model {there.key.factor('model.d_model')})")
    stable = [c for c in _partners(comps, best, "stable") if c.key.factor("model.qk_norm")]
    if stable:
        s = stable[0]
        out.lines.append(f"  - with qk-norm and z-loss {s.key.factor('optim.z_loss'):g} ({s.lr}): {what} "
                         f"= {fmt_interval(s.diff)} (n = {s.n}), {rule(s).verdict}; shown, not deciding")
    if out.missing:  # a check that never ran does not pass (claim.evaluate_claim undecides the claim)
        out.labels.append(f"{', '.join(out.missing)} unchecked")
    return out


# A part read off one setting (a fraction, not a paired difference: C5, C6) is checked by reading it again in the
# cells that vary one factor; lr, init and length must have run (unchecked otherwise), size is checked where it ran.
CELL_FACTORS = {"lr": (LR_ROBUST, LR_DEPENDENT), "init": (INIT_ROBUST, INIT_DEPENDENT),
                "length": (LENGTH_ROBUST, EARLY), "size": (SIZE_ROBUST, SIZE_DEPENDENT)}
REQUIRED_FACTORS = ("lr", "init", "length")


def cell_check(verdict: Verdict, where: str, cells: dict[str, list[tuple]], inherent: tuple[str, ...] = (),
               here_in_band: bool = True) -> Robustness:
    """A part's verdict in its deciding cell (`where`), checked against the same part read in the cells that vary
    one factor (`cells`: factor → [(the cell in words, its verdict[, in the practice band, or why it cannot
    decide])]), as `check` does: a decided verdict stands only where every other in-band cell gives the same verdict
    (else inconclusive (X-dependent)); a cell outside the band, or one that cannot stand in for the deciding one (its
    reason in place of the band flag: a depth pair whose depths trained unequal tokens), is shown with its label, and
    a part read outside the band (`here_in_band` False) is inconclusive (no setting in the practice band). A factor
    of REQUIRED_FACTORS with no in-band cell that may decide is unchecked (Robustness.missing), unless the part
    varies it itself (`inherent`: C6 reads every lr, C5's GELU part is one part per init in the band, C8's depth
    interaction holds the lr choice in its nested interval)."""
    out = Robustness(verdict)
    if not here_in_band:
        out.labels.append("read outside the practice band")
        out.downgrade(f"inconclusive ({NO_BAND})", f"read only at {where}, outside the band")
    for factor, (robust, dependent) in CELL_FACTORS.items():
        others = [(w, v, *(rest or (True,))) for w, v, *rest in cells.get(factor) or []]
        inside = [(w, v) for w, v, band in others if band is True]
        if factor in inherent:
            out.checked.append(factor)
            continue
        for w, v, band in others:
            if band is False:
                if f"{v.verdict} outside the band" not in out.labels:  # one label per verdict, a line per cell
                    out.labels.append(f"{v.verdict} outside the band")
                out.lines.append(f"  - {v.verdict} at {w} (outside the practice band: shown, not deciding)")
            elif band is not True:  # the reason it cannot decide
                out.labels.append(f"{v.verdict} ({band})")
                out.lines.append(f"  - {v.verdict} at {w} ({'' if band in w else band + ': '}shown, not deciding)")
        if not inside:
            if factor in REQUIRED_FACTORS:
                out.unrun(factor, "no runs vary it in the practice band")
            continue
        out.checked.append(factor)
        differ = [(w, v) for w, v in inside if v.verdict != verdict.verdict]
        out.labels.append(dependent if differ else robust)
        out.lines.append(f"  - {dependent if differ else robust}: {verdict.verdict} at {where}; "
                         + "; ".join(f"{v.verdict} at {w} ({v.reason})" for w, v in inside))
        if differ:
            out.downgrade(f"inconclusive ({dependent})", "; ".join(f"{v.verdict} at {w}" for w, v in differ)
                          + f", {verdict.verdict} at {where}")
    if out.missing:
        out.labels.append(f"{', '.join(out.missing)} unchecked")
    return out


def verdict_rule(rule: Callable[[Paired], Verdict] = verdict_better, b_worse_supports: bool = True) -> Rule:
    """A Rule (a comparison → its verdict) from a rule on the paired difference and its direction."""
    return lambda c: c.verdict(rule, b_worse_supports)


def beats_side(claim: str, c: Comparison) -> Side:
    """What the lr checks ask a difference to keep, from the outcome-table row the deciding comparison c reads:
    where c is contradicted (its interval's upper end below +m: equivalent, below 0, or no gain as large as m),
    staying below +m, whatever its sign; else its sign (supported: above 0)."""
    return beats_region(beats_rule(claim)(nested(c) or c), margin_nats(claim, c))


def beats_region(verdict: Verdict, m: float) -> Side:
    """The region of the outcome table a reading of "A beats B" (`verdict`, margin m) asks every other reading to
    keep: below +m where it is contradicted (its interval's upper end below +m), else the side of 0."""
    return (lambda d: int(d >= m)) if verdict.verdict == CONTRADICTED else sign


def beats_sides(claim: str) -> SideOf:
    """beats_side at each comparison `check` judges: the deciding one and every cell."""
    return SideOf(lambda c: beats_side(claim, c))


def beats_rule(claim: str) -> Rule:
    """"a beats b" for `claim`, with its pre-registered margin at each comparison (claims.margins): the outcome
    table's rows (stats.verdicts.verdict_beats)."""
    return lambda c: c.verdict(lambda d: verdict_beats(d, margin_nats(claim, c)))
