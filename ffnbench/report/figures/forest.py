"""The forest plot: each headline difference in every (size, length, init) cell, the practice band and the margins."""

from __future__ import annotations

from pathlib import Path

from ffnbench.claims import Run
from ffnbench.report.figures.plotting import pyplot, save
from ffnbench.report.regime import FIGURE as REGIME_FIGURE
from ffnbench.report.regime import HEADLINE, NEAR_ZERO, regime, what

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
    plt = pyplot()
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
    # the init on a second line: one line per cell ran past the figure's left edge
    axes[0][0].set_yticks(range(len(cells)), ["\n".join(c.label.rsplit(", ", 1))
                                              + ("" if in_band(c.setting) else " (outside the band)")
                                              for c in cells], fontsize=7)
    axes[0][0].set_ylim(len(cells) - 0.5, -0.5)  # the first cell (the deciding setting) on top
    return save(fig, out, REGIME_FIGURE)
