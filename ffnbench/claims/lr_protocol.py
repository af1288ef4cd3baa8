"""The lr protocol: how each variant's lr is chosen, one implementation for the sweep's tuning stage
(ffnbench.sweep.tuning) and the report (ffnbench.claims, ffnbench.report).

A variant judged at one lr for everyone can win because that lr suits it; a variant whose lr was decided by one
unstable tuning run (a plateau or a spike, not its loss at that lr) is judged at the wrong lr. So:
- **choice**: the lr with the lowest *median* final loss over its tuning seeds, a diverged seed counting as +∞
  (so an lr where half or more of the seeds diverged can never be chosen, and one bad seed of three cannot
  decide); ties go to the smaller lr;
- **grid**: at least `min_lrs` lrs spaced ×√2 (half an octave), each on the same `min_seeds` tuning seeds;
- **bracketing**: a choice at an edge of the grid extends it there by one half-octave step (new tuning runs on the
  same seeds), up to `bracket_cap` steps, before any judged run starts. Higher lrs end at an instability wall and
  lower ones at slow training, so the optimum gets bracketed; one still at an edge after the cap is judged anyway
  and named "optimum not bracketed".

Pure functions of runs (claims.runs.Run) and numbers, and the method the sweep, the claims and the report share: it
lives with the claims (the sweep plans by it, the claims judge by it), and imports no training code."""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ffnbench.claims.runs import Run, group_by, outcomes_by_seed
from ffnbench.config.validate import check_known_keys
from ffnbench.errors import ConfigError
from ffnbench.runs.instability import Thresholds

STEP = math.sqrt(2)  # the grid's spacing: half an octave
SIG_DIGITS = 3  # lrs are rounded to this many significant digits, so a grid and its extensions name the same runs
ROBUST_MIN_LRS, ROBUST_MIN_SEEDS = 7, 3  # the full protocol's grid
SHORT_MIN_LRS, SHORT_MIN_SEEDS = 5, 2  # the shortest grid a robust preset may give an arm (a costly one)
NOT_BRACKETED = "optimum not bracketed"


ANCHOR = 1e-3  # the half-octave lattice every grid and extension sits on: 0.001·2^(k/2), k an integer


def round_lr(lr: float) -> float:
    """`lr` to SIG_DIGITS significant digits (0.0056568… → 0.00566), as grids and extensions write it."""
    return float(f"{lr:.{SIG_DIGITS}g}")


def lattice_index(lr: float) -> int:
    """k of the lattice point 0.001·2^(k/2) nearest to `lr`."""
    return round(2 * math.log2(lr / ANCHOR))


def lattice_lr(k: int) -> float:
    return round_lr(ANCHOR * 2 ** (k / 2))


def half_octave_grid(low: float, n: int) -> list[float]:
    """n lattice lrs from the one nearest `low` up, ×√2 apart: half_octave_grid(0.001, 3) == [0.001, 0.00141, 0.002].
    On the lattice, a grid written from any of its points and its extensions name the same (rounded) lrs."""
    k = lattice_index(low)
    return [lattice_lr(k + i) for i in range(n)]


def next_lr(edge: float, direction: str) -> float:
    """The lattice lr one half-octave beyond `edge` ("up" or "down")."""
    return lattice_lr(lattice_index(edge) + (1 if direction == "up" else -1))


def neighbour_lrs(lr: float) -> tuple[float, float]:
    """The lrs half an octave below and above `lr` (÷√2, ×√2), rounded as grids write them: its lattice neighbours
    when `lr` is on the lattice (neighbour_lrs(0.004) == (0.00283, 0.00566)), else lr/√2 and lr·√2."""
    k = lattice_index(lr)
    if lattice_lr(k) == lr:
        return lattice_lr(k - 1), lattice_lr(k + 1)
    return round_lr(lr / STEP), round_lr(lr * STEP)


@dataclass(frozen=True)
class LrProtocol:
    """`cfg.lr_protocol` (conf/train.yaml). Not part of a run's identity: it decides which runs a sweep makes,
    not what any run computes.

    Args:
        robust: the preset asks for the full protocol: its tuning grids are checked against min_lrs/min_seeds.
        min_lrs: the fewest lrs a tuning grid may have (robust only; at least SHORT_MIN_LRS).
        min_seeds: the fewest tuning seeds at each lr (robust only; at least SHORT_MIN_SEEDS).
        bracket_cap: how many half-octave steps the sweep may extend a grid by, in all, to bracket the optimum
            (0: never; the chosen lr may then sit at an edge, and the report names it).
        judge_neighbours: every judged seed of an `optim.lr: tuned` job also runs at the chosen lr's two lattice
            neighbours (×√2 and ÷√2, `neighbour_lrs`), so that the report can resample the lr choice itself (a
            neighbour outside the tuning grid is still judged). The runs at the chosen lr are the ones they were.
    """

    robust: bool = False
    min_lrs: int = ROBUST_MIN_LRS
    min_seeds: int = ROBUST_MIN_SEEDS
    bracket_cap: int = 0
    judge_neighbours: bool = False

    def __post_init__(self) -> None:
        for name in ("robust", "judge_neighbours"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"lr_protocol.{name}: expected true or false, got {getattr(self, name)!r}")
        for name, low in (("min_lrs", SHORT_MIN_LRS), ("min_seeds", SHORT_MIN_SEEDS), ("bracket_cap", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                fix = ("(0: never extend a grid)" if name == "bracket_cap" else
                       f"(the robust protocol's shortest grid is {SHORT_MIN_LRS} lrs × {SHORT_MIN_SEEDS} seeds)")
                raise ConfigError(f"lr_protocol.{name}: must be an integer ≥ {low}, got {value!r} {fix}")

    @classmethod
    def from_config(cls, node: Mapping | None) -> LrProtocol:
        node = dict(node or {})
        check_known_keys("lr_protocol", node, cls)
        return cls(**node)

    def check_grid(self, label: str, seeds_by_lr: Mapping[float, set[int]]) -> None:
        """Refuse a tuning grid the robust protocol cannot use: too few lrs, too few seeds, or seeds that differ
        between lrs (the tuning runs also pair at a shared lr, and a plateau must have equal chances at each)."""
        if not self.robust:
            return
        lrs = sorted(seeds_by_lr)
        off = [x for x in lrs if lattice_lr(lattice_index(x)) != x]
        if off:
            k = lattice_index(off[0])
            raise ConfigError(f"{label}: tuning lr {off[0]:g} is not on the half-octave lattice 0.001·2^(k/2) that "
                              f"grid extensions step along; use {lattice_lr(k - 1):g}, {lattice_lr(k):g} or "
                              f"{lattice_lr(k + 1):g} (e.g. {','.join(f'{x:g}' for x in half_octave_grid(off[0], 7))})")
        if len(lrs) < self.min_lrs:
            raise ConfigError(f"{label}: its tuning grid has {len(lrs)} lrs ({', '.join(f'{x:g}' for x in lrs)}); "
                              f"the robust lr protocol asks for at least {self.min_lrs} spaced ×√2 (e.g. "
                              f"{','.join(f'{x:g}' for x in half_octave_grid(lrs[0] if lrs else 1e-3, self.min_lrs))})")
        seed_sets = {frozenset(s) for s in seeds_by_lr.values()}
        if len(seed_sets) > 1:
            raise ConfigError(f"{label}: its tuning lrs ran on different seeds; give every lr the same tuning seeds")
        seeds = sorted(next(iter(seed_sets)))
        if len(seeds) < self.min_seeds:
            example = ",".join(str(100 + i) for i in range(self.min_seeds))
            raise ConfigError(f"{label}: its tuning grid has {len(seeds)} seed{'s' * (len(seeds) != 1)} at each lr "
                              f"({', '.join(map(str, seeds))}); the robust lr protocol asks for at least "
                              f"{self.min_seeds} (e.g. seed: \"{example}\")")


def check_protocols(config: Mapping) -> None:
    """The blocks a run carries that judge runs rather than make them (lr_protocol, instability): checked by the
    sweep's planner for every job and by a run itself, so that a bad value stops either before any work."""
    LrProtocol.from_config(config.get("lr_protocol"))
    Thresholds.from_config(config.get("instability"))


def lr_protocol(config: Mapping) -> LrProtocol:
    """The protocol a run's resolved config names (the default where it names none: records from before it)."""
    return LrProtocol.from_config(config.get("lr_protocol"))


# ---- the choice ------------------------------------------------------------------------------------------


def _outcomes(runs: Iterable[Run]) -> dict[float, list[float]]:
    """{lr: one final loss per seed, +∞ for a diverged seed} over the runs with an outcome."""
    runs = list(runs)
    out: dict[float, list[float]] = {}
    for lr in sorted({r.lr for r in runs}):
        at = outcomes_by_seed(r for r in runs if r.lr == lr).values()  # one per seed: extra runs don't count twice
        if at:
            out[lr] = [math.inf if r.diverged else r.loss for r in at]
    return out


def median_losses(runs: Iterable[Run]) -> dict[float, float]:
    """{lr: the median final loss over its seeds, a diverged seed counting as +∞} — what the choice ranks."""
    return {lr: statistics.median(losses) for lr, losses in _outcomes(runs).items()}


def best_lr(runs: Sequence[Run]) -> float:
    """The lr to judge a variant at: the lowest median final loss over its seeds (median_losses), then the
    smaller lr. ValueError when no lr has a finite median (half or more of the seeds diverged everywhere)."""
    medians = {lr: m for lr, m in median_losses(runs).items() if math.isfinite(m)}
    if not medians:
        raise ValueError("no lr has a finite median final loss")
    return min(medians, key=lambda lr: (medians[lr], lr))


def edge(lr: float, lrs: Iterable[float]) -> str | None:
    """"down" when `lr` is the smallest of `lrs` (a smaller one may be better), "up" when the largest, else None
    (bracketed). A grid of one lr brackets nothing: "up" (the protocol extends upward first)."""
    lrs = sorted(set(lrs))
    if len(lrs) > 1 and lr == lrs[0]:
        return "down"
    if lr == lrs[-1]:
        return "up"
    return None


def bracketing(runs: Sequence[Run], lr: float) -> str | None:
    """NOT_BRACKETED with the side when the chosen `lr` sits at an edge of the lrs its runs tried, else None."""
    side = edge(lr, {r.lr for r in runs})
    if side is None:
        return None
    return f"{NOT_BRACKETED} (at the {'lower' if side == 'down' else 'upper'} edge of {len({r.lr for r in runs})} lrs)"


def tuning_key(r: Run) -> tuple:
    """What a run shares with the tuning runs that choose its lr (sweep.tuning): everything but the lr and seed."""
    return (r.setting, r.act, r.sizing, r.ratio, r.bias, r.multiple_of)


def chosen_lrs(tuning: Iterable[Run]) -> dict[tuple, float]:
    """{tuning_key: the lr best_lr picks from those tuning runs} over the groups that can choose — the choice
    `make sweep` made for the judged runs with optim.lr=tuned (ffnbench.sweep.tuning.choose_lr)."""
    groups = group_by((r for r in tuning if r.role == "tuning"), tuning_key)
    out = {}
    for k, rs in groups.items():
        with contextlib.suppress(ValueError):  # a group that cannot choose chose nothing
            out[k] = best_lr(rs)
    return out


NEIGHBOUR = "neighbour"  # Run.role of a judged run at a lattice neighbour of its variant's chosen lr


def mark_neighbours(runs: Sequence[Run]) -> list[Run]:
    """`runs` with role NEIGHBOUR on each judged run that `lr_protocol.judge_neighbours` made at an lr other than
    the one its tuning runs choose (chosen_lrs): it is judged beside the chosen lr, never in its place. Runs
    without that flag (records from before it) keep their role, whatever their lr."""
    import dataclasses

    chosen = chosen_lrs(runs)
    out = []
    for r in runs:
        flagged = (r.result.config.get("lr_protocol") or {}).get("judge_neighbours") is True
        lr = chosen.get(tuning_key(r))
        if r.role == "judged" and flagged and lr is not None and r.lr != lr:
            r = dataclasses.replace(r, role=NEIGHBOUR)
        out.append(r)
    return out


def describe_choice(runs: Sequence[Run], lr: float) -> str:
    """Why best_lr chose `lr`, in words, for the report's Learning rates section."""
    outcomes = _outcomes(runs)
    seeds = sorted({r.seed for r in runs})
    reason = f"lowest median final loss over tuning seeds {', '.join(map(str, seeds))}"
    walled = [x for x, losses in outcomes.items() if not math.isfinite(statistics.median(losses))]
    if walled:
        reason += f"; half or more of the seeds diverged at {', '.join(f'{x:g}' for x in walled)} (never chosen)"
    mean_best = min((x for x, ls in outcomes.items() if all(map(math.isfinite, ls))),
                    key=lambda x: (sum(outcomes[x]) / len(outcomes[x]), x), default=lr)
    if mean_best != lr:
        reason += f"; the mean would have chosen {mean_best:g} (an unstable seed moves a mean, not a median)"
    side = bracketing(runs, lr)
    if side:
        reason += f" — **{side}**: a better lr may lie beyond"
    return reason

