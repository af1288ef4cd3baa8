"""What a claim is (its registry entry), what its evaluator reads and returns, and how its evidence becomes
a verdict under the uniform rules."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ffnbench.claims.band import centre_distance
from ffnbench.claims.runs import Run, Setting, is_reference
from ffnbench.stats.intervals import Paired, Summary
from ffnbench.stats.multiplicity import combine, holm
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, ONE_SEED, Verdict

KINDS = ("analytic", "trained", "benchmark")


@dataclass(frozen=True)
class Observations:
    """What the claims are judged on: the sweep's judged runs, finished and diverged (the loss statistics use
    the finished ones), its lr-tuning runs (ffnbench.sweep.tuning: they only choose lrs, in compare_sides) and the
    alignment benchmark files found for C9."""

    runs: tuple[Run, ...]
    bench_files: tuple[Path, ...] = ()
    tuning: tuple[Run, ...] = ()
    # judged runs at a lattice neighbour of their variant's chosen lr (lr_protocol.mark_neighbours): they widen
    # the lr choice's uncertainty, and never stand in for the runs at the chosen lr
    neighbours: tuple[Run, ...] = ()

    @classmethod
    def of(cls, runs: Iterable[Run], bench_files: Iterable[Path] = ()) -> Observations:
        runs = tuple(runs)
        return cls(tuple(r for r in runs if r.role == "judged"), tuple(bench_files),
                   tuple(r for r in runs if r.role == "tuning"), tuple(r for r in runs if r.role == "neighbour"))

    @property
    def with_neighbours(self) -> tuple[Run, ...]:
        """The judged runs, the tuning runs and the neighbour runs: what compare_sides takes for a deciding
        comparison (the neighbours widen its interval by the lr choice, claims.robust)."""
        return (*self.runs, *self.tuning, *self.neighbours)

    @property
    def with_tuning(self) -> tuple[Run, ...]:
        """The judged runs and the tuning runs that choose their lrs: what compare_sides takes."""
        return (*self.runs, *self.tuning)

    @cached_property
    def base_setting(self) -> Setting | None:
        """Where a claim's deciding comparison is taken (pairing.primary): among the reference settings of usable
        runs (runs.is_reference: in the practice band), the init nearest the band's centre (claims.band.centre_distance:
        pre-registered, not the arm with most runs), then the most common, a tie going to the shorter training (the
        longer one is the length check's, claims.robust). With no setting in the band, the most common of all (its
        verdicts then say so)."""
        counts = Counter(r.setting for r in self.runs if r.usable)
        reference = Counter({s: n for s, n in counts.items() if is_reference(s)})
        pool = reference or counts
        return min(pool, key=lambda s: (centre_distance(s) if reference else 0.0, -pool[s],
                                        dict(s).get("trainer.tokens_per_param") or 0, str(s))) if pool else None


@dataclass(frozen=True)
class Headline:
    """The effect a claim's row shows (report.rows): the first interval its effect text gives, the difference's short
    name ('loss(relu) − loss(gelu)', '2 layers', '' where the claim's section must name it), and whether it is a signed
    difference (a fraction is not)."""

    name: str
    value: Paired | Summary
    signed: bool = True


@dataclass
class Evidence:
    """What a claim's rule found: its parts (a conjunction), the headline effect, the seeds behind it
    (None: no runs of this claim in the sweep) and the numbers behind it (markdown lines)."""

    parts: list[tuple[str, Verdict]] = field(default_factory=list)
    effect: str = ""
    n: int | None = None
    details: list[str] = field(default_factory=list)
    where: Setting | None = None  # the setting the deciding comparison (or the part read first) ran in
    # the robustness factors (lr, init, length) that no runs varied for a deciding comparison (claims.robust): the
    # parts are the reading where the runs ran; the claim is decided only where every factor ran and agrees
    unchecked: list[str] = field(default_factory=list)

    # a part's own unchecked factors (parts read in one cell: C5, C6): they undecide the claim unless another part
    # decides it without them (a contradicted part whose factors all ran, or one that needs none: at init)
    part_missing: dict[str, list[str]] = field(default_factory=dict)
    headline: Headline | None = None  # the effect the Claims table shows: the first one noted
    labels: list[str] = field(default_factory=list)  # the deciding comparisons' robustness labels, in effect order

    def note(self, name: str, value: Paired | Summary, labels: Iterable[str] = (), signed: bool = True) -> None:
        """An interval the effect text gives, with the labels printed beside it: the first one noted with an
        interval is the claim's headline (the first one noted, where none has)."""
        self._headline(Headline(name, value, signed))
        self.labels += [x for x in labels if x not in self.labels]

    def _headline(self, h: Headline) -> None:
        if self.headline is None or (not self.headline.value.has_ci and h.value.has_ci):
            self.headline = h

    def merge(self, other: Evidence) -> None:
        """Another Evidence's headline and labels, after this one's (a claim made of comparison claims: C13)."""
        if other.headline is not None:
            self._headline(other.headline)
        self.labels += [x for x in other.labels if x not in self.labels]

    def add_unchecked(self, factors) -> None:
        self.unchecked += [f for f in factors if f not in self.unchecked]

    def add_part(self, label: str, verdict: Verdict, missing=()) -> None:
        """A part of the conjunction; `missing`: the factors no run varied for it (claims.robust.cell_check)."""
        self.parts.append((label, verdict))
        if missing:
            self.part_missing[label] = list(missing)

    def all_unchecked(self) -> list[str]:
        """The factors that keep the conjunction from being decided: the deciding comparisons' (`unchecked`) and
        those of every decided part, unless a part is contradicted (after Holm) with none of its own."""
        out = list(self.unchecked)
        corrected = holm(self.parts)
        if any(v.verdict == CONTRADICTED and label not in self.part_missing for label, v in corrected):
            return out
        for label, v in corrected:
            if v.verdict != INCONCLUSIVE:
                out += [f for f in self.part_missing.get(label, ()) if f not in out]
        return out


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One registry entry. `statement` is the claim in the project's words, `source` points at its section
    of docs/claims.md, `rule` and `why` are printed beside the verdict, and `evaluate` reads the
    observations into evidence."""

    id: str
    statement: str
    source: str
    kind: str  # analytic | trained | benchmark
    experiment: str | None = None  # the sweep that tests a trained claim (conf/experiment/<name>.yaml)
    needs: str  # which runs
    rule: str
    why: str
    evaluate: Callable[[Observations], Evidence] = field(repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "trained" and not self.experiment:
            raise ValueError(f"claim {self.id}: a trained claim names the experiment that tests it")

    @property
    def command(self) -> str:
        """The command that produces what this claim is judged on."""
        if self.kind == "analytic":
            return "python -m ffnbench params"
        if self.kind == "benchmark":
            return "make bench"
        return f"make sweep EXP={self.experiment}"


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict, its headline effect, its seeds, its numbers, and the verdict of each of its parts
    after the multiplicity correction (stats.multiplicity.holm), shown one by one in the report beside the
    conjunction."""

    claim: Claim
    verdict: Verdict
    effect: str
    n: int | None
    details: list[str]
    parts: tuple[tuple[str, Verdict], ...] = ()
    # the verdict where the runs ran (the parts' conjunction), before unchecked factors undecide it: the scoped
    # reading ("relu beats swish at GPT-2's init, 1×"), never the claim's verdict where a factor is unchecked
    scoped: Verdict | None = None
    unchecked: tuple[str, ...] = ()
    where: Setting | None = None  # Evidence.where
    headline: Headline | None = None  # Evidence.headline
    labels: tuple[str, ...] = ()  # Evidence.labels


UNCHECKED_ORDER = ("lr", "init", "length")


def unchecked_verdict(verdict: Verdict, unchecked: Iterable[str]) -> Verdict:
    """A decided verdict with unchecked factors → inconclusive (init unchecked), keeping what it would be."""
    names = sorted(set(unchecked), key=lambda f: (UNCHECKED_ORDER.index(f) if f in UNCHECKED_ORDER else 9, f))
    if not names or verdict.verdict == INCONCLUSIVE:
        return verdict
    label = ", ".join(names)
    return Verdict(INCONCLUSIVE, f"inconclusive ({label} unchecked): no runs vary {label} for its deciding "
                                 f"comparison (would be {verdict.verdict} where it ran: {verdict.reason})",
                   verdict.p_value)


def evaluate_claim(claim: Claim, obs: Observations) -> ClaimResult:
    """The claim's evidence combined into one verdict: its parts' conjunction; a trained claim with no runs
    is inconclusive with the command that makes them, and one with fewer than two seeds is at most
    inconclusive."""
    ev = claim.evaluate(obs)
    if claim.kind == "trained" and ev.n is None:
        reason = f"not in this sweep: run `make sweep EXP={claim.experiment}`"
        return ClaimResult(claim, Verdict(INCONCLUSIVE, reason), ev.effect or f"n/a: {reason}", None, ev.details,
                           tuple(holm(ev.parts)))
    verdict = combine(ev.parts)
    if claim.kind == "trained" and (ev.n or 0) < 2 and verdict.verdict != INCONCLUSIVE:
        verdict = Verdict(INCONCLUSIVE, f"{ONE_SEED} (would be {verdict.verdict}: {verdict.reason})")
    scoped = verdict
    unchecked = ev.all_unchecked()
    if claim.kind == "trained":
        verdict = unchecked_verdict(verdict, unchecked)
    return ClaimResult(claim, verdict, ev.effect, ev.n, ev.details, tuple(holm(ev.parts)), scoped, tuple(unchecked),
                       ev.where, ev.headline, tuple(ev.labels))


def min_n(*ns: int | None) -> int | None:
    """The fewest seeds among the parts that have a count (None when none has)."""
    present = [n for n in ns if n is not None]
    return min(present) if present else None
