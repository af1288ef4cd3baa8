"""The report's figures, as PNG files under figures/: each one drawn only when the sweep has the runs it
needs, named for what it shows, and captioned with the claims it bears on."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ffnbench.claims import Run, describe_setting, group_by, stat_of, summary_of
from ffnbench.claims.lr_protocol import best_lr, median_losses
from ffnbench.claims.runs import init_name
from ffnbench.report.comparisons import mean_of, primary_runs, variant_order
from ffnbench.report.instabilities import kinds_of
from ffnbench.report.lrgrid import families, figure_name, grid_lrs, plotted
from ffnbench.report.regime import FIGURE as REGIME_FIGURE
from ffnbench.report.regime import HEADLINE, NEAR_ZERO, regime, what
from ffnbench.stats.intervals import Summary


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    _pyplot().close(fig)
    return name


def _err(s: Summary) -> float:
    """Half-width of the 95% interval for an error bar; 0 where there is none (one seed)."""
    return (s.ci_high - s.mean) if s.has_ci else 0.0


def _varying(keys: list[tuple]) -> list[str]:
    """Labels for lines that differ in several factors: only the factors that actually differ."""
    names = [[str(v) if k == "act" else f"{k} {v}" for k, v in key] for key in keys]
    differ = [i for i in range(len(names[0])) if len({n[i] for n in names}) > 1] if names else []
    return [", ".join(n[i] for i in differ) for n in names]


def fig_loss_vs_ratio(runs: list[Run], out: Path) -> str | None:
    """Loss against d_ff / d_model, one line per ungated activation and budget with at least two ratios, from the
    judged runs: where a width had tuning runs, its judged runs at the lr they chose (the tuned points that decide
    C1), else one line per lr."""
    from ffnbench.claims.lr_protocol import chosen_lrs, tuning_key

    chosen = chosen_lrs(runs)

    def lr_of(r: Run):
        return "tuned" if tuning_key(r) in chosen else r.lr

    judged = [r for r in runs if r.usable and not r.gated and r.role == "judged"
              and (tuning_key(r) not in chosen or r.lr == chosen[tuning_key(r)])]
    series = group_by(judged,
                      lambda r: (("act", r.act), ("budget", "fixed N" if r.factor("model.non_embedding_params")
                                                  else "fixed d_model"), ("lr", lr_of(r)), ("setting", r.setting),
                                 ("bias", r.bias)))
    series = {k: group_by(v, lambda r: r.ratio) for k, v in series.items() if len({r.ratio for r in v}) >= 2}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keys = sorted(series, key=str)
    for key, label in zip(keys, _varying([tuple((k, v) for k, v in key if k != "setting") for key in keys])):
        ratios = sorted(series[key])
        sums = [summary_of(series[key][x]) for x in ratios]
        ax.errorbar(ratios, [s.mean for s in sums], yerr=[_err(s) for s in sums], marker="o", capsize=3,
                    label=label or dict(key)["act"], linestyle="--" if dict(key)["budget"] == "fixed N" else "-")
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({x for ratios in series.values() for x in ratios}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("d_ff / d_model (FFN width ratio, log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title("Loss vs FFN width ratio, judged runs (error bars: 95% CI over seeds)", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out, "loss_vs_ratio.png")


def fig_loss_vs_params(runs: list[Run], out: Path) -> str | None:
    """Loss against FFN parameters in the main comparison; skipped when all budgets match (within 10%)."""
    points = group_by([r for r in primary_runs(runs) if r.usable], lambda r: (r.act, r.label))
    sizes = {rs[0].ffn_total for rs in points.values()}
    if not sizes or max(sizes) < 1.1 * min(sizes):  # matched budgets only: that is the matched-budget figure
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keys = sorted(points, key=lambda k: (points[k][0].ffn_total, str(k)))
    same = Counter(points[k][0].ffn_total for k in keys)
    placed: Counter = Counter()
    markers = "osD^v<>ph*"
    for i, k in enumerate(keys):
        size = points[k][0].ffn_total
        spread = 0.04 * (placed[size] - (same[size] - 1) / 2)  # variants of one size side by side, not on top
        placed[size] += 1
        s_ = summary_of(points[k])
        ax.errorbar([size * (1 + spread)], [s_.mean], yerr=[_err(s_)], marker=markers[i % len(markers)],
                    linestyle="none", capsize=3, color=_pyplot().get_cmap("tab20")(i % 20), label=k[1])
    ax.set_xscale("log")
    ax.set_xlabel("FFN parameters, all layers (log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title("Loss vs FFN parameters, main comparison (error bars: 95% CI)", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, out, "loss_vs_ffn_params.png")


REFERENCE_ACT = "gelu"  # what fig_matched_budget differences every variant against


def fig_matched_budget(runs: list[Run], out: Path) -> str | None:
    """Each variant's paired difference from gelu at the textbook budget, as the verdicts read it (each side at its
    tuned lr on fresh seeds, the interval with the lr choice where neighbour runs exist), a panel per setting that
    ran such comparisons; at fixed lrs (a sweep without tuning), the paired difference at the lr with the most seeds."""
    from ffnbench.claims.pairing import act_is, compare_sides, matched_key
    from ffnbench.claims.robust import nested

    acts = sorted({r.act for r in runs if r.act != REFERENCE_ACT and r.budget_ratio == 4 and not r.bias},
                  key=lambda a: variant_order(next(r for r in runs if r.act == a)))
    cells: dict = defaultdict(dict)
    for act in acts:
        for c in compare_sides(runs, act_is(REFERENCE_ACT), act_is(act), matched_key, (REFERENCE_ACT, act)):
            if c.key.budget != 4 or c.key.bias or c.diff.mean is None:
                continue
            seen = cells[c.key.setting].get(act)
            rank = (c.best_lr, c.n)
            if seen is None or rank > (seen.best_lr, seen.n):
                cells[c.key.setting][act] = c
    cells = {k: v for k, v in cells.items() if v}
    if not cells:
        return None
    plt = _pyplot()
    keys = sorted(cells, key=lambda k: (dict(k).get("model.init") not in (None, "gpt2"),
                                        dict(k).get("trainer.tokens_per_param") or 0, str(k)))
    fig, axes = plt.subplots(1, len(keys), figsize=(3.8 * len(keys) + 1.5, 0.38 * len(acts) + 1.8), sharey=True,
                             squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for y, act in enumerate(acts):
            c = cells[key].get(act)
            if c is None:
                continue
            d = (nested(c) or c).diff
            err = [[d.mean - d.ci_low], [d.ci_high - d.mean]] if d.has_ci else None
            ax.errorbar([d.mean], [y], xerr=err, fmt="o", capsize=3, color="tab:blue" if c.best_lr else "tab:gray")
            ax.annotate(f"n={d.n}", (d.ci_high if d.has_ci else d.mean, y), xytext=(3, 0), textcoords="offset points",
                        fontsize=6, va="center")
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(describe_setting(key), fontsize=7)
        ax.set_xlabel(f"loss(variant) − loss({REFERENCE_ACT}), nats, 95% CI")
    axes[0][0].set_yticks(range(len(acts)), acts, fontsize=8)
    axes[0][0].set_ylim(len(acts) - 0.5, -0.5)
    import textwrap

    title = (f"Paired by seed against {REFERENCE_ACT} at a matched budget (4×); negative: the variant is better; "
             "blue: each at its tuned lr, grey: one shared lr")
    fig.suptitle("\n".join(textwrap.wrap(title, 70 * len(keys))), fontsize=8)
    return _save(fig, out, "matched_budget.png")


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
    plt = _pyplot()
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
    return _save(fig, out, "curves.png")


def _short(setting) -> str:
    """A setting in a legend's few words: layers, tokens per parameter, init (and d_model where it is not 64)."""
    s = dict(setting)
    words = [f"{s.get('model.n_layer')}L", f"{s.get('trainer.tokens_per_param') or 0:g} tok/p",
             init_name(setting)]
    if s.get("model.d_model") not in (None, 64):
        words.insert(0, f"d{s.get('model.d_model')}")
    return " ".join(words)


def fig_sparsity(runs: list[Run], out: Path) -> str | None:
    """C5's and C6's data against lr where the sweep varies lr: relu's and gelu's exact-zero fraction after training
    (left) and relu's dead units (right, the 40% the claim names dashed), per setting, at the textbook budget
    without bias; a dot per run, the mean over seeds as a line. Else one bar group per variant."""
    finished = [r for r in runs if r.status == "finished" and r.final and r.act in ("relu", "gelu")
                and r.budget_ratio == 4 and not r.bias and not r.factor("model.non_embedding_params")]
    grids = group_by(finished, lambda r: (r.act, r.setting))
    grids = {k: v for k, v in grids.items() if len({r.lr for r in v}) >= 2}
    plt = _pyplot()
    if grids:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, key in enumerate(sorted(grids, key=lambda k: (k[0], str(k[1])))):
            act, setting = key
            rs = grids[key]
            lrs = sorted({r.lr for r in rs})
            color, style = colors[i % len(colors)], "-" if act == "relu" else "--"
            for ax, stat in zip(axes, ("zero_frac", "dead_frac")):
                if stat == "dead_frac" and act != "relu":
                    continue
                get = stat_of("final", stat)
                ax.scatter([r.lr for r in rs], [get(r) for r in rs], s=8, color=color, alpha=0.35)
                ax.plot(lrs, [mean_of(get(r) for r in rs if r.lr == lr) for lr in lrs], style, marker="o",
                        markersize=3, color=color, label=f"{act}, {_short(setting)}")
        axes[1].axhline(0.4, color="black", linestyle=":", linewidth=1, label="40% (C6)")
        from matplotlib.ticker import NullFormatter

        for ax, what in zip(axes, ("C5: exact zeros in the hidden activation (relu, gelu)",
                                   "C6: dead relu units (0 on every validation token)")):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("learning rate")
            ax.set_ylabel("fraction after training")
            ax.set_title(what, fontsize=10)
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=6, loc="best")
        return _save(fig, out, "sparsity_vs_lr.png")
    variants = group_by(sorted([r for r in primary_runs(finished)], key=variant_order), lambda r: r.label)
    if not variants:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(variants) + 2), 4.2))
    width = 0.27
    for i, (block, stat, name) in enumerate((("init", "zero_frac", "zeros at init"),
                                             ("final", "zero_frac", "zeros after training"),
                                             ("final", "dead_frac", "dead units after training"))):
        ys = [mean_of(stat_of(block, stat)(r) for r in rs) or 0.0 for rs in variants.values()]
        ax.bar([j + (i - 1) * width for j in range(len(variants))], ys, width=width, label=name)
    ax.set_xticks(range(len(variants)), list(variants), rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("FFN variant")
    ax.set_ylabel("fraction of hidden activations / units")
    ax.set_title("Hidden-activation sparsity per variant")
    ax.legend(fontsize=8)
    return _save(fig, out, "sparsity.png")


def fig_throughput(runs: list[Run], out: Path) -> str | None:
    """Every run's training tokens/s per variant of the main comparison, the median marked: the spread shows how much
    of a sweep's throughput is machine load, so the figure compares nothing (`make bench` times variants side by
    side)."""
    variants = group_by(sorted([r for r in primary_runs(runs) if r.usable and r.tokens_per_s], key=variant_order),
                        lambda r: r.label)
    if not variants:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(variants) + 2), 4.2))
    for i, rs in enumerate(variants.values()):
        speeds = sorted(r.tokens_per_s for r in rs)
        ax.scatter([i] * len(speeds), speeds, s=10, alpha=0.6, color="tab:blue")
        ax.hlines(statistics.median(speeds), i - 0.3, i + 0.3, color="black", linewidth=1.5)
    ax.set_xticks(range(len(variants)), list(variants), rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("FFN variant")
    ax.set_ylabel("training throughput (tokens/s)")
    ax.set_title("Tokens/s of each run as this sweep measured it (bar: median)\nmachine load, not a comparison: "
                 "`make bench` times the variants side by side", fontsize=9)
    return _save(fig, out, "throughput.png")


ROW = 0.045  # axes fraction between the rows of diverged marks in fig_lr_curves


def fig_lr_curves(runs: list[Run], out: Path) -> list[tuple[str, str]]:
    """One figure per comparison family with two lrs or more (lrgrid.families): final loss against lr, one colour
    per variant, a dot per tuning seed, the median over seeds as a line, the chosen lr circled. (setting, file)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter, NullLocator
    from matplotlib.transforms import blended_transform_factory

    drawn = []
    for setting, variants in (f for f in families(runs) if plotted(f[1])):
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8.0, 4.2))
        top = blended_transform_factory(ax.transData, ax.transAxes)  # x in lr, y in the axes' height
        # Diverged seeds have no loss: drawn in a row per variant along the top edge, out of the y autoscaling.
        rows = [label for label, rs in variants.items() if any(r.diverged for r in rs)]
        for i, (label, rs) in enumerate(variants.items()):
            colour = f"C{i % 10}"
            done = [r for r in rs if r.usable]
            unstable = [r for r in done if kinds_of(r) & {"plateau", "spike"}]
            steady = [r for r in done if r not in unstable]
            ax.plot([r.lr for r in steady], [r.loss for r in steady], "o", color=colour, alpha=0.55, markersize=4)
            ax.plot([r.lr for r in unstable], [r.loss for r in unstable], "x", color=colour, markersize=6)
            diverged = Counter(r.lr for r in rs if r.diverged)
            if diverged:
                y = 0.97 - ROW * rows.index(label)
                ax.plot(list(diverged), [y] * len(diverged), "^", color=colour, markersize=6, transform=top)
                for lr, k in diverged.items():
                    if k > 1:  # seeds at one lr share a mark: say how many
                        ax.text(lr, y, f" ×{k}", color=colour, fontsize=7, va="center", transform=top)
            medians = median_losses(rs)
            xs = sorted(medians)  # a wall (an infinite median) is a NaN: a gap in the line, not a point
            ax.plot(xs, [medians[x] if math.isfinite(medians[x]) else math.nan for x in xs], "-", color=colour,
                    linewidth=1.3, marker="_", markersize=9, label=label)  # the dash: a median cut off by walls
            if any(math.isfinite(m) for m in medians.values()):
                chosen = best_lr(rs)
                ax.plot([chosen], [medians[chosen]], "o", markersize=13, markerfacecolor="none",
                        markeredgecolor=colour, markeredgewidth=1.5)
            # the judged seeds (at the chosen lr, and at its neighbours where they ran): mean and 95% CI, a little
            # to the right of their lr
            judged = [r for r in runs if r.setting == setting and r.label == label and r.usable
                      and r.role in ("judged", "neighbour")]
            for lr in sorted({r.lr for r in judged}):
                sm = summary_of([r for r in judged if r.lr == lr])
                err = [[sm.mean - sm.ci_low], [sm.ci_high - sm.mean]] if sm.has_ci else None
                ax.errorbar([lr * 1.06], [sm.mean], yerr=err, fmt="D", color=colour, markersize=4, capsize=2,
                            markerfacecolor="white")
        if rows:  # room at the top for the rows of diverged marks, above every loss
            low, high = ax.get_ylim()
            ax.set_ylim(low, low + (high - low) / (1 - 0.05 - ROW * len(rows)))
            sep = 0.94 - ROW * (len(rows) - 1)  # between the band of diverged marks and the losses' y range
            ax.plot([0, 1], [sep, sep], ":", color="0.6", linewidth=0.8, transform=ax.transAxes)
        lrs = grid_lrs(variants)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(lrs, [f"{x:g}" for x in lrs], rotation=45, fontsize=7)
        ax.set_xlabel("learning rate (log scale)")
        ax.set_ylabel("final validation loss (nats/token)")
        import textwrap

        ax.set_title("\n".join(textwrap.wrap(describe_setting(setting), 90)), fontsize=8)
        grey = "0.35"
        marks = [Line2D([], [], marker="o", color=grey, linestyle="none", markersize=4, label="tuning seed"),
                 Line2D([], [], marker="x", color=grey, linestyle="none", label="seed with a plateau or spike"),
                 Line2D([], [], marker="^", color=grey, linestyle="none", label="diverged seed (no loss)"),
                 Line2D([], [], marker="o", color=grey, linestyle="none", markersize=11, markerfacecolor="none",
                        label="chosen lr (lowest median)"),
                 Line2D([], [], marker="D", color=grey, linestyle="none", markersize=4, markerfacecolor="white",
                        label="judged seeds: mean, 95% CI")]
        handles = [*ax.get_legend_handles_labels()[0], *marks]
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
        drawn.append((describe_setting(setting), _save(fig, out, figure_name(len(drawn) + 1))))
    return drawn


# A figure drawer returns its file's name (None: not drawn), or (what, file) for each of several files: those are
# captioned "<caption>: <what>".
Drawer = Callable[[list[Run], Path], str | list[tuple[str, str]] | None]
# the claim whose margin a headline pair's panel draws (C7's is in bits per byte: its panel draws none)
PAIR_CLAIM = {("gelu", "relu"): "C4", ("swiglu", "gelu"): "C3", ("gelu", "linear"): "C13", ("swish", "relu"): "C8"}


def fig_regime(runs: list[Run], out: Path) -> str | None:
    """The forest plot: a panel per headline difference (report.regime), a row per (size, length, init) cell: the
    best-vs-best value with its 95% interval, the textbook's side of 0 shaded, the claim's margin ±m dashed (at the
    deciding cell's loss), and the cells outside the practice band greyed (they never decide)."""
    from ffnbench.claims.band import in_band
    from ffnbench.claims.margins import margin_nats

    cells, found = regime(runs)
    if len(cells) < 2:  # one setting: the matched-budget figure shows it
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(HEADLINE), figsize=(3.6 * len(HEADLINE), 0.5 * len(cells) + 1.8), sharey=True,
                             squeeze=False)
    for ax, pair in zip(axes[0], HEADLINE, strict=True):
        shown = [(y, found[(cell, pair)].diff) for y, cell in enumerate(cells)
                 if (cell, pair) in found and found[(cell, pair)].diff.mean is not None]
        below = [d.mean - d.ci_low if d.has_ci else 0.0 for _, d in shown]
        above = [d.ci_high - d.mean if d.has_ci else 0.0 for _, d in shown]
        ax.errorbar([d.mean for _, d in shown], [y for y, _ in shown], xerr=[below, above], fmt="o", capsize=3,
                    color="tab:blue")
        for (y, d), a in zip(shown, above, strict=True):
            ax.annotate(f"n={d.n}", (d.mean + a, y), xytext=(3, 0), textcoords="offset points", fontsize=6,
                        va="center")
        left = min([d.mean - b for (_, d), b in zip(shown, below, strict=True)] + [0.0])
        right = max([d.mean + a for (_, d), a in zip(shown, above, strict=True)] + [0.0])
        pad = max(right - left, 0.02) * 0.15  # room for the n labels
        ax.set_xlim(left - pad, right + pad)
        ax.axvline(0, color="black", linewidth=0.8)
        for y, cell in enumerate(cells):
            if not in_band(cell.setting):
                ax.axhspan(y - 0.5, y + 0.5, color="grey", alpha=0.15, linewidth=0)
        deciding = found.get((cells[0], pair))
        if pair in PAIR_CLAIM and deciding is not None and deciding.a_runs:
            m = margin_nats(PAIR_CLAIM[pair], deciding)
            for x in (-m, m):
                ax.axvline(x, color="tab:red", linestyle="--", linewidth=0.8)
        if pair in NEAR_ZERO:  # C7: the textbook says the biases can go, a difference of about 0
            ax.set_title(f"{what(*pair)}\n(≈ 0: the textbook's 'biases can go')", fontsize=9)
        else:
            ax.axvspan(0, right + pad, color="tab:green", alpha=0.08)
            ax.set_title(f"{what(*pair)}\n(> 0, shaded: the textbook's order)", fontsize=9)
        ax.set_xlabel("nats/token, 95% CI")
    axes[0][0].set_yticks(range(len(cells)), [c.label + ("" if in_band(c.setting) else " (outside the band)")
                                              for c in cells], fontsize=7)
    axes[0][0].set_ylim(len(cells) - 0.5, -0.5)  # the first cell (the deciding setting) on top
    return _save(fig, out, REGIME_FIGURE)


LR_CURVES_CAPTION = ("Final validation loss against lr, per comparison family: a dot per tuning seed (x: a run with "
                     "a plateau or a spike; a triangle at the top edge: a diverged seed, which has no loss, ×k: k "
                     "seeds), the median over seeds as a line (broken where half or more diverged), the chosen lr "
                     "circled")

FIGURES: tuple[tuple[str, Drawer], ...] = (
    ("Loss vs FFN width ratio, per activation (C1)", fig_loss_vs_ratio),
    ("Loss vs FFN parameters", fig_loss_vs_params),
    ("Matched-budget comparison with 95% CIs (C3, C4, C8, C13)", fig_matched_budget),
    (CURVES_CAPTION, fig_curves),
    ("Zero fraction and dead units (C5, C6)", fig_sparsity),
    ("Throughput per variant (C7, C9)", fig_throughput),
    ("Forest plot: each headline difference, best-vs-best, in every (size, length, init) cell; grey rows lie outside "
     "the practice band (they never decide), dashed red lines are the claim's margin ±m (C3, C4, C8, C13)", fig_regime),
    (LR_CURVES_CAPTION, fig_lr_curves),
)


def draw_figures(runs: list[Run], out: Path) -> list[tuple[str, str]]:
    """(caption, file name) of every figure whose data exists; stale figures from an earlier report go."""
    if out.exists():
        for old in out.glob("*.png"):
            old.unlink()
    drawn = []
    for caption, draw in FIGURES:
        name = draw(runs, out)
        if isinstance(name, str):
            drawn.append((caption, name))
        elif name:
            drawn += [(f"{caption}: {what}", file) for what, file in name]
    return drawn

