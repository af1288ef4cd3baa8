"""How the report groups runs, for its tables and its figures alike: one comparison per (model setting, lr),
the sweep's most common one first, and the variants of a comparison in a fixed order (the activations in
ffn.VARIANTS order, then sizing, ratio, bias, rounding)."""

from __future__ import annotations

from collections.abc import Iterable

from ffnbench.claims import Run, group_by
from ffnbench.ffn import VARIANTS

_ACT_ORDER = {name: i for i, name in enumerate(VARIANTS)}


def variant_order(r: Run) -> tuple:
    """Sort key: the variant's activation (tanh approximations next to their exact form), then its shape."""
    return (_ACT_ORDER.get(r.act.split("-")[0], 99), r.act, r.sizing, r.ratio, r.bias, r.multiple_of, r.label)


def comparisons(runs: list[Run]) -> list[tuple[tuple, float, dict[str, list[Run]]]]:
    """(setting, lr, {FFN label: its runs}) per comparison, the one with the most usable runs first."""
    groups = group_by(runs, lambda r: (r.setting, r.lr))
    order = sorted(groups, key=lambda k: (-sum(r.usable for r in groups[k]), str(k)))
    out = []
    for key in order:
        variants = group_by(sorted(groups[key], key=variant_order), lambda r: r.label)
        out.append((key[0], key[1], dict(variants)))
    return out


def primary_runs(runs: list[Run]) -> list[Run]:
    """The sweep's main comparison: every run (usable or not) of the most common (setting, lr)."""
    tables = comparisons([r for r in runs if r.usable])
    if not tables:
        return []
    setting, lr, _ = tables[0]
    return [r for r in runs if r.setting == setting and r.lr == lr]


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values present; None when there is none."""
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None
