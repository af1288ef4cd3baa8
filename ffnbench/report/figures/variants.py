"""Per-variant figures of what a run records besides its loss: the hidden activation's zeros and dead units
(C5, C6), and the throughput each run measured."""

from __future__ import annotations

import statistics
from pathlib import Path

from ffnbench.claims import Run, group_by, stat_of
from ffnbench.claims.runs import short_setting
from ffnbench.report.comparisons import mean_of, primary_runs, variant_order
from ffnbench.report.figures.plotting import pyplot, save


def fig_sparsity(runs: list[Run], out: Path) -> str | None:
    """C5's and C6's data against lr where the sweep varies lr: relu's and gelu's exact-zero fraction after training
    (left) and relu's dead units (right, the 40% the claim names dashed), per setting, at the textbook budget
    without bias; a dot per run, the mean over seeds as a line. Else one bar group per variant."""
    finished = [r for r in runs if r.status == "finished" and r.final and r.act in ("relu", "gelu")
                and r.budget_ratio == 4 and not r.bias and not r.factor("model.non_embedding_params")]
    grids = group_by(finished, lambda r: (r.act, r.setting))
    grids = {k: v for k, v in grids.items() if len({r.lr for r in v}) >= 2}
    plt = pyplot()
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
                        markersize=3, color=color, label=f"{act}: {short_setting(setting, named=False)}")
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
        return save(fig, out, "sparsity_vs_lr.png")
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
    return save(fig, out, "sparsity.png")


def fig_throughput(runs: list[Run], out: Path) -> str | None:
    """Every run's training tokens/s per variant of the main comparison, the median marked: the spread shows how much
    of a sweep's throughput is machine load, so the figure compares nothing (`make bench` times variants side by
    side)."""
    variants = group_by(sorted([r for r in primary_runs(runs) if r.usable and r.tokens_per_s], key=variant_order),
                        lambda r: r.label)
    if not variants:
        return None
    plt = pyplot()
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
    return save(fig, out, "throughput.png")
