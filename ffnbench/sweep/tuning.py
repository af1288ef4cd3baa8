"""The learning-rate tuning stage of a sweep: each variant judged at the lr it won on seeds of its own.

A claim judged at one lr for every variant can be decided by which variant that lr happens to suit; one judged
at each variant's best lr *on the seeds it is then judged on* is optimistic (the choice fits the noise of those
seeds). So a preset may run two stages in one sweep:

    grids:
      - {ffn: "relu,gelu", optim.lr: "1e-3,2e-3,4e-3", seed: "100,101", tuning: true}  # stage 1: tuning runs
      - {ffn: "relu,gelu", optim.lr: tuned, seed: "0,1,2,3,4"}                          # stage 2: judged runs

A judged job with `optim.lr=tuned` gets the lr that `lr_protocol.best_lr` (the same rule the report uses)
picks from the tuning runs of its own config — every key equal except the lr, the seed and the `tuning` flag
(TUNING_FREE_KEYS) — once all of them have an outcome. `make sweep` runs stage 1, resolves, then runs stage 2;
the report says which lr each variant used and why. Tuning runs are never judged (claims.runs.Run.role), and
their seeds must differ from the judged runs' seeds: a fresh seed is the point.

With `lr_protocol.bracket_cap` > 0, a choice at an edge of its grid first extends the grid there (`extension`):
new tuning runs one half-octave beyond, on the same seeds, and the choice is made again once they have an outcome.
The extensions are a function of the finished runs, so a sweep planned again (after an interruption) asks for
exactly the same runs and trains none twice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ffnbench.claims.lr_protocol import best_lr, edge, lr_protocol, next_lr
from ffnbench.config.identity import NON_IDENTITY_KEYS
from ffnbench.errors import ConfigError
from ffnbench.fileio import CorruptRecord
from ffnbench.runs.result import FINAL_STATUSES, RunResult
from ffnbench.sweep.keys import config_key

TUNED = "tuned"  # the value of optim.lr in a judged grid whose lr comes from its tuning runs
TUNING_FREE_KEYS = ("optim.lr", "seed", "tuning")  # what tuning runs may differ in from the judged run they serve
GROUP_IGNORED = (*NON_IDENTITY_KEYS, *TUNING_FREE_KEYS)


def with_lr(job: Sequence[str], lr: float) -> list[str]:
    """The job with its `optim.lr=tuned` replaced by the chosen lr (repr: the exact float, as a run name says it)."""
    return [*(o for o in job if not o.startswith("optim.lr=")), f"optim.lr={lr!r}"]


def is_tuning(config: Mapping) -> bool:
    return config.get("tuning") is True


def is_tuned(config: Mapping) -> bool:
    """Whether the job's lr is the one its tuning runs will choose (`optim.lr: tuned`)."""
    return config["optim"]["lr"] == TUNED


@dataclass(frozen=True)
class TuningRun:
    """A tuning job as the planner sees it: its resolved config and its directory."""

    config: dict
    run_dir: Path
    key: frozenset = field(init=False, repr=False, compare=False)  # what tuning_group matches on, computed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", config_key(self.config, ignore=GROUP_IGNORED))


@dataclass(frozen=True)
class LrChoice:
    """The outcome of resolving one judged job's lr: `lr` None while some tuning run has no outcome yet."""

    lr: float | None
    runs: tuple[Path, ...]  # the tuning runs that decide it
    waiting: int  # how many of them have no outcome (finished or diverged) yet
    blocked: str = ""  # why no lr can be chosen although every tuning run has an outcome (all diverged)

    def describe(self) -> str:
        if self.blocked:
            return self.blocked
        if self.lr is None:
            return f"waits for {self.waiting} of {len(self.runs)} tuning runs"
        return f"lr {self.lr:g} chosen on {len(self.runs)} tuning runs"


class TuningRuns(list):
    """A sweep's tuning runs (a list of TuningRun), indexed by group, for a plan that asks each of thousands of judged
    jobs for its group: a lookup, not a pass over every tuning run (what tuning_group does with a plain list)."""

    def __init__(self, runs: Sequence[TuningRun] = ()):
        super().__init__()
        self._groups: dict[frozenset, list[TuningRun]] = {}
        self._keys: dict[int, tuple[Mapping, frozenset]] = {}  # id(config) → (config, its key): the config is kept
        self.extend(runs)

    def append(self, run: TuningRun) -> None:
        super().append(run)
        self._groups.setdefault(run.key, []).append(run)

    def extend(self, runs) -> None:
        for run in runs:
            self.append(run)

    def group(self, config: Mapping) -> list[TuningRun]:
        kept = self._keys.get(id(config))
        if kept is None or kept[0] is not config:
            kept = self._keys[id(config)] = (config, config_key(config, ignore=GROUP_IGNORED))
        return list(self._groups.get(kept[1], ()))


def tuning_group(config: Mapping, tuning: Sequence[TuningRun]) -> list[TuningRun]:
    """The tuning runs that choose `config`'s lr: same config but for TUNING_FREE_KEYS."""
    if isinstance(tuning, TuningRuns):
        return tuning.group(config)
    key = config_key(config, ignore=GROUP_IGNORED)  # equal keys ⇔ no identity_diff outside these keys
    return [t for t in tuning if t.key == key]


def check_tuning(judged: Sequence[tuple[dict, str]], tuning: Sequence[TuningRun]) -> None:
    """Refuse a preset whose stages cannot work: a judged job with `optim.lr=tuned` and no tuning runs of its
    config, or tuning runs on a seed a run they serve is judged on. `judged`: (resolved config, label) pairs."""
    for config, label in judged:
        group = tuning_group(config, tuning)
        if is_tuned(config) and not group:
            raise ConfigError(f"{label}: optim.lr=tuned but no tuning run has its config (all but optim.lr, seed); "
                              "add a grid with tuning: true and an optim.lr grid for it")
        shared = sorted({int(config["seed"])} & {int(t.config["seed"]) for t in group})
        if shared:
            raise ConfigError(f"{label}: seed {shared[0]} is used by its tuning runs too; give the tuning grid "
                              "seeds of its own (e.g. 100,101), so each variant is judged on fresh seeds")
        if group:
            seeds_by_lr: dict[float, set[int]] = {}
            for t in group:
                seeds_by_lr.setdefault(float(t.config["optim"]["lr"]), set()).add(int(t.config["seed"]))
            lr_protocol(config).check_grid(label, seeds_by_lr)


def choose_lr(config: Mapping, tuning: Sequence[TuningRun]) -> LrChoice:
    """The lr for a judged job with `optim.lr=tuned`: lr_protocol.best_lr over its tuning group once every
    run in it has an outcome; a group where no lr has a finite median (half or more of the seeds diverged at
    every lr) cannot choose (`blocked` says so)."""
    from ffnbench.claims.runs import Run

    group = tuning_group(config, tuning)
    runs, waiting = [], 0
    for t in group:
        try:
            result = RunResult.read(t.run_dir)
        except CorruptRecord:
            result = None
        if result is None or result.status not in FINAL_STATUSES:
            waiting += 1
        else:
            runs.append(Run.from_result(result))
    dirs = tuple(t.run_dir for t in group)
    if waiting:
        return LrChoice(None, dirs, waiting)
    try:
        return LrChoice(best_lr(runs), dirs, 0)
    except ValueError:  # the sweep goes on with its other variants; this one cannot
        what = (f"every one of its {len(dirs)} tuning runs diverged" if not any(r.usable for r in runs) else
                "half or more of its tuning seeds diverged at every lr")
        return LrChoice(None, dirs, 0, blocked=f"{what}: no lr to judge it at; add smaller lrs to its tuning grid")


def extension(config: Mapping, tuning: Sequence[TuningRun], jobs: Mapping[Path, Sequence[str]],
              steps_taken: int) -> list[list[str]]:
    """The tuning jobs that extend `config`'s grid by one half-octave step where its chosen lr sits at an edge
    (lr_protocol), one per tuning seed of its group, each a tuning job of that seed (`jobs`: run dir → its job)
    with the new lr; [] when the choice is bracketed, not made yet, or `steps_taken` reached the config's
    lr_protocol.bracket_cap."""
    if steps_taken >= lr_protocol(config).bracket_cap:
        return []
    choice = choose_lr(config, tuning)
    if choice.lr is None:
        return []
    group = tuning_group(config, tuning)
    lrs = [float(t.config["optim"]["lr"]) for t in group]
    side = edge(choice.lr, lrs)
    if side is None:
        return []
    new = next_lr(min(lrs) if side == "down" else max(lrs), side)
    templates: dict[int, Sequence[str]] = {}
    for t in sorted(group, key=lambda t: str(t.run_dir)):
        templates.setdefault(int(t.config["seed"]), jobs[t.run_dir])
    return [with_lr(job, new) for _, job in sorted(templates.items())]
