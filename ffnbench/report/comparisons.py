"""How the report groups runs, for its tables and its figures alike: one comparison per (model setting, lr),
the sweep's most common one first, and the variants of a comparison in a fixed order (the activations in
ffn.VARIANTS order, then sizing, ratio, bias, rounding). Judged runs at the lr their tuning runs chose
(ffnbench.sweep.tuning) form one comparison per setting, "each at its tuned lr" (lr None), and stay in the comparison
of their own lr too wherever another run was judged at that lr (e.g. an explicit lr grid); tuning runs are in
none."""

from __future__ import annotations

from collections.abc import Iterable

from ffnbench.claims import Observations, Run, group_by
from ffnbench.claims.lr_protocol import chosen_lrs, tuning_key
from ffnbench.model.ffn import VARIANTS

_ACT_ORDER = {name: i for i, name in enumerate(VARIANTS)}


def variant_order(r: Run) -> tuple:
    """Sort key: the variant's activation (tanh approximations next to their exact form), then its shape."""
    return (_ACT_ORDER.get(r.act.split("-")[0], 99), r.act, r.sizing, r.ratio, r.bias, r.multiple_of, r.label)


def comparison_lr(r: Run, chosen: dict[tuple, float]) -> float | None:
    """The lr a judged run is compared at first: None when it ran at the lr its tuning runs chose (`chosen`:
    claims.pairing.chosen_lrs), else its own. A run at its tuned lr is in its own lr's comparison too
    (comparison_lrs)."""
    return None if chosen.get(tuning_key(r)) == r.lr else r.lr


def comparison_lrs(r: Run, chosen: dict[tuple, float]) -> tuple[float | None, ...]:
    """Every lr a judged run is compared at: its own, and None too when that is the lr its tuning runs chose."""
    return (None, r.lr) if comparison_lr(r, chosen) is None else (r.lr,)


def _groups(runs: list[Run]) -> dict[tuple, list[Run]]:
    """{(setting, lr): its judged runs} per comparison (see comparisons). A fixed-lr comparison whose runs all
    ran at their tuned lr is not one of its own: those runs are the tuned comparison's."""
    chosen = chosen_lrs(runs)
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        if r.role == "judged":
            for lr in comparison_lrs(r, chosen):
                groups.setdefault((r.setting, lr), []).append(r)
    return {k: rs for k, rs in groups.items()
            if k[1] is None or any(comparison_lr(r, chosen) is not None for r in rs)}


def comparisons(runs: list[Run]) -> list[tuple[tuple, float | None, dict[str, list[Run]]]]:
    """(setting, lr, {FFN label: its runs}) per comparison of the judged runs, the one with the most usable runs
    first (the tuned one on a tie); lr None: each variant at its tuned lr. A run at its tuned lr is in both that
    comparison and its own lr's, when another run was judged at that lr (see comparison_lrs)."""
    groups = _groups(runs)
    order = sorted(groups, key=lambda k: (-sum(r.usable for r in groups[k]), k[1] is not None, str(k)))
    out = []
    for key in order:
        variants = group_by(sorted(groups[key], key=variant_order), lambda r: r.label)
        out.append((key[0], key[1], dict(variants)))
    return out


def primary_runs(runs: list[Run]) -> list[Run]:
    """The sweep's main comparison: every judged run (usable or not) of the comparison with the most usable runs
    (comparisons' order) in the sweep's base setting (Observations.base_setting, where the verdicts are decided),
    else of the first comparison. An arm with more seeds in another setting (another init, a width arm) does not
    take the figures over."""
    tables = comparisons([r for r in runs if r.usable or r.role == "tuning"])
    if not tables:
        return []
    base = Observations.of(runs).base_setting
    setting, lr, _ = next((t for t in tables if t[0] == base), tables[0])
    chosen = chosen_lrs(runs)
    return [r for r in runs if r.role == "judged" and r.setting == setting and lr in comparison_lrs(r, chosen)]


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
