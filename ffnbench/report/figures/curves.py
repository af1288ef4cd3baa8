"""The curves figure: validation and training loss against tokens per variant, with the seeds' min–max band."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ffnbench.claims import Run, group_by
from ffnbench.report.comparisons import primary_runs, variant_order
from ffnbench.report.figures.plotting import pyplot, save


@dataclass(frozen=True)
class Band:
    """One variant's curve over its seeds: at each x where every seed logged a point, the mean and the lowest and
    highest seed (the band drawn around the mean is min–max: with 2-3 seeds a standard deviation is no estimate)."""

    x: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int


def seed_band(curves: list[list[tuple[float, float]]]) -> Band:
    """The Band of some seeds' curves, [(x, y), ...] each; only finite points count."""
    per_x: dict[float, list[float]] = defaultdict(list)
    for curve in curves:
        for x, y in dict((x, y) for x, y in curve if math.isfinite(y)).items():
            per_x[x].append(y)
    xs = sorted(x for x, ys in per_x.items() if len(ys) == len(curves))
    return Band(xs, [statistics.fmean(per_x[x]) for x in xs], [min(per_x[x]) for x in xs],
                [max(per_x[x]) for x in xs], len(curves))


def train_tokens_curve(r: Run) -> list[tuple[float, float]] | None:
    """A run's training loss against tokens: the loss of the logging step's own batch, every trainer.log_every
    steps (result.json's train_curve: [[step, loss], ...], step counted from 0). None for a record without one
    (written before train_curve was recorded)."""
    train = r.result.train_curve
    if train is None:
        return None
    per_step = r.result.tokens_per_step
    return [((int(step) + 1) * per_step, float(loss)) for step, loss in train
            if loss is not None and per_step is not None]


CURVES_CAPTION = ("Validation and training loss against tokens (mean over seeds, min–max band; a point at every "
                  "validation)")


def curve_bands(runs: list[Run]) -> dict[str, tuple[Band, Band | None]]:
    """Per variant of the main comparison (finished runs): its validation Band, and its training-loss Band (None
    where a seed's record holds no training curve)."""
    variants = group_by(sorted([r for r in primary_runs(runs) if r.usable], key=variant_order), lambda r: r.label)
    bands = {}
    for label, rs in variants.items():
        val = seed_band([list(r.curve) for r in rs])
        if len(val.x) < 2:
            continue
        train = [train_tokens_curve(r) for r in rs]
        bands[label] = (val, seed_band(train) if all(t is not None for t in train) else None)
    return bands


def _tokens_label(x: float, _pos=None) -> str:
    """A token count in a tick's few characters: 80k, 1.2M."""
    return f"{x / 1e6:g}M" if abs(x) >= 1e6 else f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"


def _log_axis(ax) -> None:
    """A log loss axis labelled in plain numbers (2, 3, 4), not powers of ten."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(FuncFormatter(lambda v, _: f"{v:g}"))


def fig_curves(runs: list[Run], out: Path) -> str | None:
    """Validation loss against training tokens per variant of the main comparison, with the seeds' band: the whole
    run (log loss axis), its second half zoomed (where differences of 0.02-0.1 nats are visible), and the training
    loss; a panel says so where the records hold no training curve."""
    bands = curve_bands(runs)
    if not bands:
        return None
    plt = pyplot()
    fig, (whole, late, train) = plt.subplots(1, 3, figsize=(15, 4.4))
    end = max(val.x[-1] for val, _ in bands.values())
    tail: list[float] = []
    for i, (label, (val, tr)) in enumerate(bands.items()):
        color = f"C{i % 10}"
        seeds = f"{label} (n={val.seeds})"
        whole.plot(val.x, val.mean, color=color, linewidth=1.2, marker=".", markersize=4, label=seeds)
        whole.fill_between(val.x, val.low, val.high, color=color, alpha=0.2, linewidth=0)
        half = [j for j, x in enumerate(val.x) if x >= end / 2]
        if half:
            pick = (lambda ys, half=half: [ys[j] for j in half])
            late.plot(pick(val.x), pick(val.mean), color=color, linewidth=1.2, marker=".", label=seeds)
            late.fill_between(pick(val.x), pick(val.low), pick(val.high), color=color, alpha=0.2, linewidth=0)
            tail += pick(val.low) + pick(val.high)
        if tr is not None and tr.x:
            train.plot(tr.x, tr.mean, color=color, linewidth=1.0, label=seeds)
            train.fill_between(tr.x, tr.low, tr.high, color=color, alpha=0.2, linewidth=0)
    _log_axis(whole)
    whole.set_title("Validation loss (mean, min–max band over seeds; log axis)", fontsize=9)
    if tail:
        pad = (max(tail) - min(tail)) * 0.05 or 0.01
        late.set_ylim(min(tail) - pad, max(tail) + pad)
    late.set_title("Validation, second half of training, zoomed", fontsize=9)
    if any(tr is not None and tr.x for _, tr in bands.values()):
        _log_axis(train)
        train.set_title("Training loss: the logging step's batch, every log_every steps\n"
                        "(mean, min–max band over seeds; log axis)", fontsize=9)
    else:
        train.set_title("Training loss", fontsize=9)
        train.text(0.5, 0.5, "these records hold no training-loss curve\n(result.json's train_curve: recorded by "
                   "newer runs)", ha="center", va="center", transform=train.transAxes, fontsize=8)
        train.set_xticks([])
        train.set_yticks([])
    from matplotlib.ticker import FuncFormatter

    for ax in (whole, late, train):
        ax.set_xlabel("training tokens")
        ax.xaxis.set_major_formatter(FuncFormatter(_tokens_label))
    whole.set_ylabel("validation loss (nats/token)")
    late.set_ylabel("validation loss (nats/token)")
    train.set_ylabel("training loss (nats/token)")
    late.legend(fontsize=6, ncol=2)
    return save(fig, out, "curves.png")
