"""REPORT.md's "Cost-aware views": the main comparison's paired differences from the reference variant at equal
parameters (the end of training: the final validation loss, as everywhere else in the report) and at equal
training FLOPs (read off each run's validation curve), over the variants at the reference's parameter budget
(claims.pairing.matched_key) only. A variant that wins per parameter can lose per FLOP (a gated FFN's extra matmul).
There is no equal-wall-clock view: a sweep's per-run wall time measures what else the machine was doing (identical
configs of one campaign ran 3k-27k tokens/s), so time per variant comes from `make bench`, measured side by side."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ffnbench.claims import Run, fmt_ci
from ffnbench.claims.pairing import matched_key
from ffnbench.claims.runs import run_by_seed
from ffnbench.report.comparisons import comparisons, reference_label
from ffnbench.stats.intervals import Paired, one_sample
from ffnbench.tables import fmt, markdown_table

HEADER = ["variant − reference", "equal params (end of training)", "equal training FLOPs"]


Axis = Callable[[list[Run]], Callable[[Run], float | None]]  # a variant's runs → each run's cost per token


def flops_axis(group: list[Run]) -> Callable[[Run], float | None]:
    """Training FLOPs per token (forward + backward) of each run."""
    def per_token(r: Run) -> float | None:
        value = r.result.flops.get("per_token_training")
        return float(value) if value else None
    return per_token


def loss_at(r: Run, cost_per_token: float, budget: float) -> float | None:
    """The run's validation loss when it had spent `budget` (FLOPs or seconds), linear between checkpoints; None
    beyond the end of its curve."""
    if len(r.curve) < 2:
        return None
    spent = np.array([t for t, _ in r.curve], dtype=float) * cost_per_token
    loss = np.array([v for _, v in r.curve], dtype=float)
    if budget > spent[-1] * (1 + 1e-9):
        return None
    return float(np.interp(budget, spent, loss))


def at_equal_cost(ref: list[Run], other: list[Run], axis: Axis | None) -> Paired:
    """other − ref per seed, both read at the smaller of the two runs' total cost on `axis` (None: the final
    validation loss, Run.loss, i.e. equal parameters and tokens)."""
    a, b = run_by_seed(ref), run_by_seed(other)
    cost_a, cost_b = (axis(ref), axis(other)) if axis is not None else (None, None)
    diffs = {}
    for seed in set(a) & set(b):
        ra, rb = a[seed], b[seed]
        if axis is None:
            if ra.loss is not None and rb.loss is not None:
                diffs[seed] = rb.loss - ra.loss
            continue
        ca, cb = cost_a(ra), cost_b(rb)
        if not (ca and cb and ra.curve and rb.curve):
            continue
        budget = min(ra.curve[-1][0] * ca, rb.curve[-1][0] * cb)
        la, lb = loss_at(ra, ca, budget), loss_at(rb, cb, budget)
        if la is not None and lb is not None:
            diffs[seed] = lb - la
    return one_sample(diffs)


def _cell(d: Paired) -> str:
    return f"{fmt(d.mean, '+.4f')} {fmt_ci(d, signed=True)} (n = {d.n})" if d.n else "n/a"


def costs_section(runs: list[Run]) -> list[str]:
    """The section's markdown lines (none without a comparison of two or more variants, or with no variant at
    the reference's parameter budget but the reference)."""
    tables = [t for t in comparisons([r for r in runs if r.usable or r.role == "tuning"]) if len(t[2]) > 1]
    if not tables:
        return []
    _, _, variants = tables[0]
    ref = reference_label(variants)
    key = matched_key(variants[ref][0])
    matched = [label for label, rs in variants.items() if label != ref and key is not None
               and matched_key(rs[0]) == key]
    if not matched:
        return []
    rows = [[f"{label} − {ref}", *(_cell(at_equal_cost(variants[ref], variants[label], axis))
                                   for axis in (None, flops_axis))]
            for label in matched]
    left_out = [label for label in variants if label != ref and label not in matched]
    return ["## Cost-aware views", "",
            f"The main comparison's loss differences from **{ref}**, paired by seed (nats/token; 95% t interval "
            "over seeds; negative = better than the reference): at the end of training (equal parameters and "
            "tokens: the final validation loss), and on the validation curve at the training FLOPs the cheaper run "
            "of each pair spent, read between validation checkpoints linearly. No equal-time view: per-run wall "
            "time in a sweep is machine load, not the FFN (`make bench` measures step time side by side). "
            f"Only the variants at the reference's parameter budget ({key.budget:g}×, "
            f"{'FFN bias' if key.bias else 'no FFN bias'}"
            + (f", d_ff multiple of {key.multiple_of}" if key.multiple_of != 1 else "") + ") are compared"
            + (f"; left out, at another parameter count: {', '.join(left_out)}" if left_out else "") + ".", "",
            *markdown_table(HEADER, rows), ""]
