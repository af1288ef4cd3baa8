"""REPORT.md's "Cost-aware views": the main comparison's paired differences from the reference variant at equal
parameters (the end of training), at equal training FLOPs and at equal wall-clock time, all read off each run's
validation curve. A variant that wins per parameter can lose per FLOP (a gated FFN's extra matmul) or per second
(a slower kernel); users choosing an FFN need all three."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ffnbench import stats
from ffnbench.claims import Run, fmt_ci
from ffnbench.claims.runs import run_by_seed
from ffnbench.report.comparisons import comparisons, reference_label
from ffnbench.tables import fmt, markdown_table

HEADER = ["variant − reference", "equal params (end of training)", "equal training FLOPs", "equal wall-clock time"]


def flops_axis(r: Run) -> float | None:
    """Training FLOPs per token (forward + backward) of the run."""
    value = r.result.flops.get("per_token_training")
    return float(value) if value else None


def seconds_axis(r: Run) -> float | None:
    """Seconds of training per token, at the run's measured steady-state throughput."""
    return 1.0 / r.tokens_per_s if r.tokens_per_s else None


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


def at_equal_cost(ref: list[Run], other: list[Run], axis: Callable[[Run], float | None] | None) -> stats.Paired:
    """other − ref per seed, both read at the smaller of the two runs' total cost on `axis` (None: the end of
    each curve, i.e. equal parameters and tokens)."""
    a, b = run_by_seed(ref), run_by_seed(other)
    diffs = {}
    for seed in set(a) & set(b):
        ra, rb = a[seed], b[seed]
        if axis is None:
            if ra.curve and rb.curve:
                diffs[seed] = rb.curve[-1][1] - ra.curve[-1][1]
            continue
        ca, cb = axis(ra), axis(rb)
        if not (ca and cb and ra.curve and rb.curve):
            continue
        budget = min(ra.curve[-1][0] * ca, rb.curve[-1][0] * cb)
        la, lb = loss_at(ra, ca, budget), loss_at(rb, cb, budget)
        if la is not None and lb is not None:
            diffs[seed] = lb - la
    return stats.one_sample(diffs)


def _cell(d: stats.Paired) -> str:
    return f"{fmt(d.mean, '+.4f')} {fmt_ci(d, signed=True)} (n = {d.n})" if d.n else "n/a"


def costs_section(runs: list[Run]) -> list[str]:
    """The section's markdown lines (none without a comparison of two or more variants)."""
    tables = [t for t in comparisons([r for r in runs if r.usable or r.role == "tuning"]) if len(t[2]) > 1]
    if not tables:
        return []
    _, _, variants = tables[0]
    ref = reference_label(variants)
    rows = [[f"{label} − {ref}", *(_cell(at_equal_cost(variants[ref], rs, axis))
                                   for axis in (None, flops_axis, seconds_axis))]
            for label, rs in variants.items() if label != ref]
    return ["## Cost-aware views", "",
            f"The main comparison's loss differences from **{ref}**, paired by seed (nats/token on the validation "
            "curve's windows; 95% t interval over seeds; negative = better than the reference): at the end of "
            "training (equal parameters and tokens), at the training FLOPs the cheaper run of each pair spent, and "
            "at the wall-clock time the faster one took (each run's steady-state tokens/s; on a shared machine "
            "these timings carry its load). Read between validation checkpoints linearly.", "",
            *markdown_table(HEADER, rows), ""]
