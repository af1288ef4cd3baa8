"""REPORT.md's "Learning-rate grids" section: per comparison family (the tuning runs of one setting, which differ
only in the FFN variant and share their tuning seeds), each variant's median final loss at every lr of the grid,
its lr sensitivity and whether its optimum is bracketed; then the paired differences between variants at each lr
both ran, so that a difference can be read at every lr and not only at the lrs each variant chose.

LR sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training instabilities",
§2.2): the mean over a grid's lrs of min(loss, initial loss) − the best loss, a diverged run counting at its
initial loss. Here, with several seeds at an lr: the mean over the lrs of the variant's grid of the median over
its tuning seeds of min(final loss, the run's initial validation loss) (a diverged seed: its initial loss), minus
the lowest such median. A wall (an lr where half or more of the seeds diverged) so adds a capped excess, not ∞.

The paired shared-lr differences are claims.pairing.shared_lr_differences, which the lr-robust rule reads too."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from ffnbench.claims.lr_protocol import NOT_BRACKETED, best_lr, bracketing, median_losses
from ffnbench.claims.pairing import shared_lr_differences
from ffnbench.claims.runs import Run, Setting, describe_setting, group_by, outcomes_by_seed
from ffnbench.report.comparisons import variant_order
from ffnbench.report.layout import FIGURES_DIR
from ffnbench.stats.intervals import Paired
from ffnbench.tables import MISSING, markdown_table

ALL_PAIRS_UP_TO = 4  # variants in a family up to which every pair is shown; beyond, the first against each other


# ---- the pure part ------------------------------------------------------------------------------------------


def families(runs: Iterable[Run]) -> list[tuple[Setting, dict[str, list[Run]]]]:
    """(setting, {variant label: its tuning runs}) per comparison family, settings in a fixed order (by name) and
    variants in variant_order; judged runs are in none."""
    tuning = sorted((r for r in runs if r.role == "tuning"), key=lambda r: (str(r.setting), variant_order(r), r.lr))
    return [(setting, dict(group_by(rs, lambda r: r.label)))
            for setting, rs in group_by(tuning, lambda r: r.setting).items()]


def grid_lrs(variants: dict[str, list[Run]]) -> list[float]:
    """The lrs at which some variant of the family has an outcome (finished with a loss, or diverged)."""
    return sorted({r.lr for rs in variants.values() for r in rs if r.usable or r.diverged})


def initial_loss(r: Run) -> float:
    """The run's validation loss before training (nats/token); ln(vocabulary size) — a uniform prediction's
    loss — when the record lacks it."""
    value = (r.result.metrics or {}).get("init_val_loss")
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return math.log(int(r.result.model["vocab_size"]))


def capped_medians(runs: Iterable[Run]) -> dict[float, float]:
    """{lr: the median over its seeds of min(final loss, initial loss)}, a diverged seed at its initial loss:
    the losses LR sensitivity averages (module docstring)."""
    runs = list(runs)
    out = {}
    for lr in sorted({r.lr for r in runs}):
        at = outcomes_by_seed(r for r in runs if r.lr == lr).values()  # one per seed, as median_losses counts
        if at:
            out[lr] = statistics.median(initial_loss(r) if r.diverged else min(r.loss, initial_loss(r)) for r in at)
    return out


def lr_sensitivity(runs: Iterable[Run], lrs: Iterable[float] | None = None) -> float | None:
    """A variant's LR sensitivity over the lrs its tuning runs tried (module docstring), or over `lrs` only (the
    ones every variant compared with it tried: variants whose grids were extended differently would otherwise
    average over different lrs), in nats; None with fewer than two lrs (no variation to be sensitive to), or when no
    lr has a finite median final loss (nothing was learned to deviate from)."""
    runs = [r for r in runs if r.role == "tuning" and (lrs is None or r.lr in set(lrs))]
    medians = capped_medians(runs)
    if len(medians) < 2 or not any(math.isfinite(m) for m in median_losses(runs).values()):
        return None
    low = min(medians.values())  # the chosen lr's median wherever no loss there is above its initial loss
    return sum(m - low for m in medians.values()) / len(medians)


def variant_pairs(labels: list[str]) -> list[tuple[str, str]]:
    """(a, b) pairs to difference: every pair (a before b) up to ALL_PAIRS_UP_TO variants, else the first
    against each other one."""
    if len(labels) <= ALL_PAIRS_UP_TO:
        return [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]
    return [(labels[0], b) for b in labels[1:]]


def figure_name(i: int) -> str:
    """The file of the i-th (from 1) plotted family's loss-vs-lr figure (figures.lr.fig_lr_curves)."""
    return f"lr_curves_{i}.png"


def plotted(variants: dict[str, list[Run]]) -> bool:
    """Whether a family gets a figure: its grid has two lrs or more."""
    return len(grid_lrs(variants)) >= 2


# ---- the section --------------------------------------------------------------------------------------------


def _median_cell(median: float | None, chosen: bool) -> str:
    if median is None:
        return MISSING
    text = "∞" if math.isinf(median) else f"{median:.3f}"
    return f"**{text}**" if chosen else text


def _bracketed_cell(runs: list[Run], lr: float | None) -> str:
    if lr is None:
        return "n/a (no lr with a finite median)"
    side = bracketing(runs, lr)
    return "yes" if side is None else "no " + side.removeprefix(NOT_BRACKETED).strip()


def _difference_cell(d: Paired | None) -> str:
    if d is None or d.mean is None:
        return MISSING
    if not d.has_ci:  # one seed, or the same difference at every seed: no estimate of the noise
        return f"{d.mean:+.4f} ({'1 seed' if d.n == 1 else f'n={d.n}, identical at every seed'}: no interval)"
    return f"{d.mean:+.4f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}] (n={d.n})"


def grid_table(variants: dict[str, list[Run]], lrs: list[float]) -> list[str]:
    """Rows = variants, columns = the family's lrs: median final loss (bold at the chosen lr), then the variant's
    lr sensitivity and whether its optimum is bracketed."""
    rows = []
    shared = set.intersection(*({r.lr for r in rs if r.role == "tuning"} for rs in variants.values()))
    for label, rs in variants.items():
        medians = median_losses(rs)
        try:
            chosen: float | None = best_lr(rs)
        except ValueError:
            chosen = None
        sensitivity = lr_sensitivity(rs, shared)
        rows.append([label, *(_median_cell(medians.get(lr), lr == chosen) for lr in lrs),
                     f"{sensitivity:.3f}" if sensitivity is not None
                     else "n/a (one lr)" if len(medians) < 2 else "n/a (no finite median)",
                     _bracketed_cell(rs, chosen)])
    span = f"{min(shared):g}–{max(shared):g}, {len(shared)} lrs" if shared else "none shared"
    return markdown_table(["variant", *(f"lr {lr:g}" for lr in lrs), f"lr sensitivity (nats; the shared lrs {span})",
                           "optimum bracketed"], rows)


def differences_table(variants: dict[str, list[Run]], lrs: list[float]) -> list[str]:
    """One row per variant pair (variant_pairs), one column per lr: b − a over the tuning seeds both finished."""
    rows = []
    for a, b in variant_pairs(list(variants)):
        diffs = shared_lr_differences(variants[a], variants[b])
        rows.append([f"{b} − {a}", *(_difference_cell(diffs.get(lr)) for lr in lrs)])
    return markdown_table(["pair", *(f"lr {lr:g}" for lr in lrs)], rows)


def lrgrid_section(runs: list[Run]) -> list[str]:
    """The section's markdown lines; none when no run of the sweep is a tuning run."""
    fams = families(runs)
    if not fams:
        return []
    lines = ["## Learning-rate grids", "",
             "Per comparison family — the tuning runs of one setting, which differ only in the FFN variant and ran on "
             "the same tuning seeds — each variant's median final validation loss (nats/token) over its tuning seeds "
             "at every lr of the grid: a diverged seed counts as +∞, so ∞ marks an lr where half or more diverged; "
             f"{MISSING}: not run; **bold**: the lr chosen (Learning rates). **LR sensitivity** (Wortsman et al. "
             "2023, *Small-scale proxies for large-scale Transformer training instabilities*): the mean, over the "
             "lrs the variant's grid tried, of the median over its seeds of min(final loss, the run's initial "
             "validation loss) minus the lowest such median, a diverged seed counting at its initial loss (ln of "
             "the vocabulary size where the record lacks it), so a wall adds a capped excess rather than ∞; lower "
             "is flatter; it averages over the lrs every variant of the family tried (bracketing extends grids "
             "differently). "
             "Below each grid, the paired differences at each lr both variants ran (b − a over the tuning seeds "
             "both finished; a seed that diverged on either side is left out): whether an ordering holds across "
             "lrs, not only at each variant's chosen one. 95% interval in brackets.", ""]
    figure = 0
    for setting, variants in fams:
        lrs = grid_lrs(variants)
        lines += [f"### {describe_setting(setting)}", "", *grid_table(variants, lrs), ""]
        if plotted(variants):
            figure += 1
            lines += [f"Loss against lr: `{FIGURES_DIR}/{figure_name(figure)}` (Figures).", ""]
        if len(variants) > 1:
            lines += ["Paired differences at a shared lr (nats; negative: b has the lower loss):", "",
                      *differences_table(variants, lrs), ""]
    return lines
