"""How the report groups runs, for its tables and its figures alike: one comparison per (model setting, lr),
the sweep's most common one first, and the variants of a comparison in a fixed order (the activations in
ffn.VARIANTS order, then sizing, ratio, bias, rounding). Judged runs at the lr their tuning runs chose
(ffnbench.tuning) form one comparison per setting, "each at its tuned lr" (lr None); tuning runs are in none."""

from __future__ import annotations

from collections.abc import Iterable

from ffnbench.claims import Run, group_by
from ffnbench.claims.pairing import chosen_lrs, tuning_key
from ffnbench.ffn import VARIANTS

_ACT_ORDER = {name: i for i, name in enumerate(VARIANTS)}


def variant_order(r: Run) -> tuple:
    """Sort key: the variant's activation (tanh approximations next to their exact form), then its shape."""
    return (_ACT_ORDER.get(r.act.split("-")[0], 99), r.act, r.sizing, r.ratio, r.bias, r.multiple_of, r.label)


def comparison_lr(r: Run, chosen: dict[tuple, float]) -> float | None:
    """The lr a judged run is compared at: None when it ran at the lr its tuning runs chose (`chosen`:
    claims.pairing.chosen_lrs), else its own."""
    return None if chosen.get(tuning_key(r)) == r.lr else r.lr


def comparisons(runs: list[Run]) -> list[tuple[tuple, float | None, dict[str, list[Run]]]]:
    """(setting, lr, {FFN label: its runs}) per comparison of the judged runs, the one with the most usable runs
    first; lr None: each variant at its tuned lr (see comparison_lr)."""
    chosen = chosen_lrs(runs)
    judged = [r for r in runs if r.role != "tuning"]
    groups = group_by(judged, lambda r: (r.setting, comparison_lr(r, chosen)))
    order = sorted(groups, key=lambda k: (-sum(r.usable for r in groups[k]), k[1] is not None, str(k)))
    out = []
    for key in order:
        variants = group_by(sorted(groups[key], key=variant_order), lambda r: r.label)
        out.append((key[0], key[1], dict(variants)))
    return out


def primary_runs(runs: list[Run]) -> list[Run]:
    """The sweep's main comparison: every judged run (usable or not) of the most common (setting, lr)."""
    tables = comparisons([r for r in runs if r.usable or r.role == "tuning"])
    if not tables:
        return []
    setting, lr, _ = tables[0]
    chosen = chosen_lrs(runs)
    return [r for r in runs if r.role != "tuning" and r.setting == setting and comparison_lr(r, chosen) == lr]


def mean_of(values: Iterable[float | None]) -> float | None:
    """The mean of the values present; None when there is none."""
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def reference_label(variants: dict[str, list[Run]]) -> str:
    """The textbook FFN when present (GELU at 4×, no bias), else ReLU at 4×, else the variant with most runs."""
    for act in ("gelu", "relu"):
        for label, runs in variants.items():
            r = runs[0]
            if r.act == act and r.budget_ratio == 4 and not r.bias and r.multiple_of == 1:
                return label
    return max(variants, key=lambda k: (sum(r.usable for r in variants[k]), k))
