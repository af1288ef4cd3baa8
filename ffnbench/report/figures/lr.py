"""The loss-vs-lr figures, one per comparison family: every tuning seed, the median, the chosen lr and the judged
seeds."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from ffnbench.claims import Run, describe_setting, summary_of
from ffnbench.claims.lr_protocol import best_lr, median_losses
from ffnbench.report.figures.plotting import pyplot, save
from ffnbench.report.instabilities import kinds_of
from ffnbench.report.lrgrid import families, figure_name, grid_lrs, plotted

ROW = 0.045  # axes fraction between the rows of diverged marks in fig_lr_curves


def fig_lr_curves(runs: list[Run], out: Path) -> list[tuple[str, str]]:
    """One figure per comparison family with two lrs or more (lrgrid.families): final loss against lr, one colour
    per variant, a dot per tuning seed, the median over seeds as a line, the chosen lr circled. (setting, file)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter, NullLocator
    from matplotlib.transforms import blended_transform_factory

    drawn = []
    for setting, variants in (f for f in families(runs) if plotted(f[1])):
        plt = pyplot()
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
        drawn.append((describe_setting(setting), save(fig, out, figure_name(len(drawn) + 1))))
    return drawn


LR_CURVES_CAPTION = ("Final validation loss against lr, per comparison family: a dot per tuning seed (x: a run with "
                     "a plateau or a spike; a triangle at the top edge: a diverged seed, which has no loss, ×k: k "
                     "seeds), the median over seeds as a line (broken where half or more diverged), the chosen lr "
                     "circled")
