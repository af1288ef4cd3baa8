"""The robust protocol at GPU scale, defined once: a claim experiment names only its comparisons
(`hydra.sweeper.compare`), and the shared base (conf/experiment/_gpu.yaml) crosses each with the arms
(`hydra.sweeper.arms`: the lr, init, length and size cells a verdict is checked on, in priority order) into a
tuning grid and a judged grid per arm — the grids `make sweep` plans, exactly as if the preset had spelt them out.

    arms:                        # a dict, so that a preset can switch one on or off without copying the others
      gpt2_1x:   {priority: 1, set: {}}
      fan_in_1x: {priority: 2, set: {model.init: fan_in}, checks: init}
      tokens_4x: {priority: 3, set: {trainer.tokens_per_param: 20}, checks: length}
      size_base: {priority: 4, set: {model: base}, checks: size, enabled: false}
    lr_centres: {small: 0.002, base: 0.001}   # each size's grid is the 7 lattice lrs around its centre
    tuning_seeds: "100,101,102"
    judged_seeds: "0,1,2,3,4,5"

Pure functions of the sweeper's config node: the planner (ffnbench.sweep.planning), the sweeper
(hydra_plugins.ffnbench_sweeper) and the cost estimate read the same grids."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ffnbench.claims.lr_protocol import ROBUST_MIN_LRS, half_octave_grid, lattice_index, lattice_lr
from ffnbench.errors import ConfigError

ALWAYS_CHECKED = "lr"  # every arm tunes its lr on ≥ 7 lrs × ≥ 3 seeds, judged at the chosen lr and its neighbours


@dataclass(frozen=True)
class Arm:
    """One cell of the robust protocol: the overrides that make it (`set`), the factor a verdict checks on it
    (`checks`: init, length, size; None for the base arm) and its place in the priority order."""

    name: str
    priority: int
    set: dict
    checks: str | None = None
    enabled: bool = True


def arms_of(node: Mapping | None) -> list[Arm]:
    """The enabled arms of `hydra.sweeper.arms`, in priority order."""
    out = []
    for name, spec in dict(node or {}).items():
        spec = dict(spec or {})
        unknown = set(spec) - {"priority", "set", "checks", "enabled"}
        if unknown:
            raise ConfigError(f"hydra.sweeper.arms.{name}: unknown key {sorted(unknown)[0]!r} (an arm has priority, "
                              "set, checks, enabled)")
        if not isinstance(spec.get("priority"), int):
            raise ConfigError(f"hydra.sweeper.arms.{name}.priority: an integer (1 runs first), got "
                              f"{spec.get('priority')!r}")
        out.append(Arm(name, spec["priority"], dict(spec.get("set") or {}), spec.get("checks"),
                       bool(spec.get("enabled", True))))
    return sorted((a for a in out if a.enabled), key=lambda a: (a.priority, a.name))


def lr_grid(centre: float, n: int = ROBUST_MIN_LRS) -> list[float]:
    """`n` lattice lrs spaced ×√2 with `centre` (its lattice point) in the middle."""
    k = lattice_index(centre)
    return half_octave_grid(lattice_lr(k - (n - 1) // 2), n)


def _size(compare: Mapping, arm: Arm, base_model: str) -> str:
    return str(arm.set.get("model", compare.get("model", base_model)))


@dataclass(frozen=True)
class ArmGrid:
    """One expanded grid and the arm it belongs to (the dry-run's cost per arm, the budget's cut)."""

    arm: Arm
    grid: dict
    tuning: bool


def arm_grids(sweeper: Mapping, base_model: str) -> list[ArmGrid]:
    """Every arm × every comparison of `hydra.sweeper` (`compare`, `arms`, `lr_centres`, `tuning_seeds`,
    `judged_seeds`), tuning grid then judged grid, arms in priority order; [] when the preset names no
    comparisons. `base_model`: the model the preset trains where an arm does not change it."""
    compare = list(sweeper.get("compare") or [])
    if not compare:
        return []
    arms = arms_of(sweeper.get("arms"))
    if not arms:
        raise ConfigError("hydra.sweeper.compare needs hydra.sweeper.arms (conf/experiment/_gpu.yaml defines them)")
    centres = dict(sweeper.get("lr_centres") or {})
    tuning_seeds, judged_seeds = sweeper.get("tuning_seeds"), sweeper.get("judged_seeds")
    if not tuning_seeds or not judged_seeds:
        raise ConfigError("hydra.sweeper.compare needs tuning_seeds and judged_seeds (e.g. \"100,101,102\" and "
                          "\"0,1,2,3,4,5\")")
    out = []
    for arm in arms:
        for comparison in compare:
            comparison = dict(comparison)
            size = _size(comparison, arm, base_model)
            if size not in centres:
                raise ConfigError(f"hydra.sweeper.lr_centres has no centre for model={size} (arm {arm.name}); add "
                                  f"lr_centres.{size}: its expected best lr")
            cell = {**comparison, **arm.set}
            lrs = ",".join(f"{x:g}" for x in lr_grid(float(centres[size])))
            out.append(ArmGrid(arm, {**cell, "optim.lr": lrs, "seed": str(tuning_seeds), "tuning": True}, True))
            out.append(ArmGrid(arm, {**cell, "optim.lr": "tuned", "seed": str(judged_seeds)}, False))
    return out


def checked_factors(arms: list[Arm]) -> list[str]:
    """The factors a verdict can be checked on with these arms: lr always, and each arm's `checks`."""
    return [ALWAYS_CHECKED, *dict.fromkeys(a.checks for a in arms if a.checks)]
