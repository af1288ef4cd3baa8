"""The report's figures, as PNG files under figures/: each one drawn only when the sweep has the runs it
needs, named for what it shows, and captioned with the claims it bears on. One module per kind of figure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ffnbench.claims import Run
from ffnbench.report.figures.budgets import fig_loss_vs_params, fig_loss_vs_ratio, fig_matched_budget
from ffnbench.report.figures.curves import CURVES_CAPTION, curve_bands, fig_curves, seed_band
from ffnbench.report.figures.forest import fig_regime
from ffnbench.report.figures.lr import LR_CURVES_CAPTION, fig_lr_curves
from ffnbench.report.figures.variants import fig_sparsity, fig_throughput

# A figure drawer returns its file's name (None: not drawn), or (what, file) for each of several files: those are
# captioned "<caption>: <what>".
Drawer = Callable[[list[Run], Path], str | list[tuple[str, str]] | None]

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


__all__ = ["CURVES_CAPTION", "FIGURES", "LR_CURVES_CAPTION", "curve_bands", "draw_figures", "fig_curves", "fig_regime",
           "seed_band"]
