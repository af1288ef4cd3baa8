"""A run's instabilities, read off its loss curves: each an outcome of its variant at its lr, recorded in
result.json (`instabilities`) and counted in the report, never a reason to drop the run.

- **diverged**: the loss stopped being finite (the run stopped there: LMModule._diverge). Size: none.
- **plateau**: the validation loss is still near the corpus's unigram loss (what a model that ignores the context
  reaches: data.cache.unigram_loss, a fact of the corpus) well after warmup: within `plateau_margin` nats of it at
  the first checkpoint at or after `plateau_after`·warmup_steps. Step: the last checkpoint still that near; size:
  the steps it stayed there after warmup. A run that plateaus is stuck, not slow: its final loss says more about
  the plateau than about its lr.
- **spike**: after warmup, the training loss rises more than `spike_margin` nats above its running minimum, then
  comes back within that margin. Step: the peak; size: the peak's height above the running minimum (nats).
  A rise that never comes back is a spike too, marked `recovered: false`.
- **no_learning**: a finished run that did not learn. Its final validation loss is above the uniform loss ln V (worse
  than giving every token the same probability; judged whatever the run's length), or the run ended past its warmup
  but before a plateau can be judged (before `plateau_after`·warmup_steps) with its final loss still within
  `plateau_margin` nats of the unigram loss (a longer run in that state is a plateau that did not recover). Step: the
  run's last; size: its final loss (nats). Its final loss is no sample of its variant's noise: `failed_to_learn`.

Pure functions of numbers: the run records them when it ends (fit.py), and the report recounts records that
predate them from their curves (validation curve for a spike when no training curve was recorded)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ffnbench.config.validate import check_known_keys
from ffnbench.errors import ConfigError

if TYPE_CHECKING:
    from ffnbench.runs.result import RunResult

KINDS = ("diverged", "plateau", "spike", "no_learning")


@dataclass(frozen=True)
class Thresholds:
    """`cfg.instability` (conf/train.yaml), stated in the report's Method section."""

    plateau_margin: float = 0.45  # nats below the unigram loss that still count as near it
    plateau_after: float = 2.5  # in warmups: a plateau is judged at the first checkpoint at or after this
    spike_margin: float = 0.3  # nats above the running minimum

    def __post_init__(self) -> None:
        for name, high in (("plateau_margin", 5.0), ("plateau_after", 100.0), ("spike_margin", 5.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= high:
                raise ConfigError(f"instability.{name}: must be a number in (0, {high:g}], got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.plateau_after < 1:
            raise ConfigError(f"instability.plateau_after: must be at least 1 warmup (a loss during warmup is not "
                              f"yet stuck), got {self.plateau_after!r}")

    @classmethod
    def from_config(cls, node: Mapping | None) -> Thresholds:
        node = dict(node or {})
        check_known_keys("instability", node, cls)
        return cls(**node)

    def describe(self) -> str:
        return (f"plateau: validation loss within {self.plateau_margin:g} nats of the corpus's unigram loss at the "
                f"first checkpoint at or after {self.plateau_after:g}× the warmup steps; spike: after warmup, the "
                f"training loss more than {self.spike_margin:g} nats above its running minimum, then back within it; "
                "diverged: a non-finite loss")

    def describe_no_learning(self) -> str:
        return ("no learning: a final validation loss above the uniform loss ln V, or, for a run that ended past its "
                f"warmup but before {self.plateau_after:g}× it, within {self.plateau_margin:g} nats of the unigram "
                "loss")


@dataclass(frozen=True)
class Instability:
    kind: str  # KINDS
    step: int
    size: float | None  # plateau: steps after warmup; spike: nats above the running minimum; diverged: None
    recovered: bool = True

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> Instability:
        return cls(kind=str(data["kind"]), step=int(data["step"]),
                   size=None if data.get("size") is None else float(data["size"]),
                   recovered=bool(data.get("recovered", True)))

    def describe(self) -> str:
        if self.kind == "plateau":
            return f"plateau until step {self.step} ({self.size:g} steps after warmup)"
        if self.kind == "spike":
            back = "" if self.recovered else ", not recovered"
            return f"spike at step {self.step} (+{self.size:.2f} nats{back})"
        if self.kind == "no_learning":
            return f"no learning (final loss {self.size:.2f} nats at step {self.step})"
        return f"diverged at step {self.step}"


Curve = Sequence[tuple[int, float]]  # (step, loss) in step order


def plateau(val_curve: Curve, unigram_loss: float | None, warmup_steps: int, t: Thresholds) -> Instability | None:
    """The plateau of a validation curve (module docstring), or None. None too without a unigram loss or a
    checkpoint late enough to judge."""
    if unigram_loss is None or not math.isfinite(unigram_loss):
        return None
    near = unigram_loss - t.plateau_margin
    after = t.plateau_after * max(warmup_steps, 1)
    late = [(s, v) for s, v in val_curve if s >= after and math.isfinite(v)]
    if not late or late[0][1] < near:
        return None
    end = late[0][0]
    for s, v in late:
        if v < near:
            break
        end = s
    return Instability("plateau", end, float(end - warmup_steps), recovered=end < late[-1][0])


def spikes(train_curve: Curve, warmup_steps: int, t: Thresholds) -> list[Instability]:
    """Every spike of a training curve (module docstring), in step order: one per excursion above the margin."""
    out: list[Instability] = []
    low = math.inf  # the running minimum after warmup
    peak: tuple[int, float, float] | None = None  # (step, loss, the minimum it rose above) of the open excursion
    for s, v in train_curve:
        if not math.isfinite(v):
            break  # a divergence, not a spike
        if s < warmup_steps:
            continue
        if peak is None:
            if v > low + t.spike_margin:
                peak = (s, v, low)
            else:
                low = min(low, v)
        elif v > peak[1]:
            peak = (s, v, peak[2])
        elif v <= peak[2] + t.spike_margin:  # back: the excursion ends
            out.append(Instability("spike", peak[0], peak[1] - peak[2]))
            peak, low = None, min(low, v)
    if peak is not None:
        out.append(Instability("spike", peak[0], peak[1] - peak[2], recovered=False))
    return out


def no_learning(*, status: str, steps: int | None, final_loss: float | None, uniform_loss: float | None,
                unigram_loss: float | None, warmup_steps: int, t: Thresholds) -> Instability | None:
    """Whether a run ended without learning (module docstring), or None. Only a finished run is judged (an
    interrupted or failed one has not ended), on its final validation loss."""
    if status != "finished" or not steps or final_loss is None or not math.isfinite(final_loss):
        return None
    worse_than_chance = uniform_loss is not None and final_loss > uniform_loss
    unjudged_plateau = (unigram_loss is not None and math.isfinite(unigram_loss)
                        and warmup_steps < steps < t.plateau_after * max(warmup_steps, 1)
                        and final_loss >= unigram_loss - t.plateau_margin)
    if worse_than_chance or unjudged_plateau:
        return Instability("no_learning", int(steps), float(final_loss), recovered=False)
    return None


def detect(*, status: str, steps: int | None, val_curve: Curve, train_curve: Curve | None, unigram_loss: float | None,
           warmup_steps: int, thresholds: Thresholds, final_loss: float | None = None,
           uniform_loss: float | None = None) -> list[Instability]:
    """Every instability of one run, in step order. `train_curve` None (a record that predates it): spikes are
    looked for on the validation curve, which sees only the ones that last to a checkpoint. `final_loss` (the final
    validation's) and `uniform_loss` (ln V): whether it learned (no_learning); not judged without a final loss."""
    found: list[Instability] = []
    p = plateau(val_curve, unigram_loss, warmup_steps, thresholds)
    if p:
        found.append(p)
    n = no_learning(status=status, steps=steps, final_loss=final_loss, uniform_loss=uniform_loss,
                    unigram_loss=unigram_loss, warmup_steps=warmup_steps, t=thresholds)
    if n:
        found.append(n)
    found += spikes(train_curve if train_curve is not None else val_curve, warmup_steps, thresholds)
    if status == "diverged":
        bad = [s for s, v in (train_curve or []) if not math.isfinite(v)]
        found.append(Instability("diverged", bad[0] if bad else int(steps or 0), None, recovered=False))
    return sorted(found, key=lambda i: (i.step, KINDS.index(i.kind)))


def failed_to_learn(result: RunResult) -> bool:
    """Whether a run's record says it finished without learning (no_learning), judged from the record's own numbers:
    its final validation loss, vocabulary, steps, warmup and thresholds, and its corpus's unigram loss where the record
    holds it. The same answer for a record written before the kind existed, so a reader (the claims) can keep such a
    run out of the loss statistics, where its loss would pass for noise."""
    config = result.config or {}
    vocab = (result.model or {}).get("vocab_size")
    unigram = (result.data or {}).get("unigram_loss")
    return no_learning(
        status=result.status, steps=result.steps, final_loss=result.metric("final_val_loss"),
        uniform_loss=math.log(vocab) if isinstance(vocab, int) and vocab > 1 else None,
        unigram_loss=float(unigram) if isinstance(unigram, int | float) else None,
        warmup_steps=int((config.get("optim") or {}).get("warmup_steps") or 0),
        t=Thresholds.from_config(config.get("instability"))) is not None
