"""The pre-registered margins of practical relevance (DESIGN §9, docs/claims.md "the outcome table"): a paired
difference whose 95% interval's upper end lies below +m shows no gain as large as m, which contradicts "A beats B"
at this scale (inside (−m, +m): *equivalent within ±m*), and one wholly below m supports "the biases can go" (C7,
whose margin is in bits per byte: claims.bias).

A margin is relative: half the smallest effect the literature publishes for the comparison, as a fraction of the
loss (a relative loss difference reads the same in nats per token and in bits per byte, whatever the tokenizer),
times the comparison's mean loss; never below the cross-machine spread of identical runs (pairing.CROSS_MACHINE_NATS),
under which no difference is a finding. The published effects (log-perplexity on C4, Shazeer 2020, "GLU Variants
Improve Transformer", Table 1, at 65,536 and 524,288 steps) were fixed here before any verdict was read under them:
- SwiGLU against GELU (C3): 1.983 → 1.944 (2.0%) and 1.679 → 1.636 (2.6%): half the smaller, 1.0%.
- GELU against ReLU (C4): 1.997 → 1.983 (0.7%) at 65k; at 524k GELU is 0.1% worse: half the one gain, 0.35%.
- Swish against ReLU (C8): 1.997 → 1.994 (0.15%) at 65k; at 524k Swish is 0.4% worse: half the gain, 0.075%.
- a nonlinear FFN against the linear control (C13) and 4× against its width neighbours (C1): no published loss
  difference at a matched budget; the floor alone."""

from __future__ import annotations

from ffnbench.claims.pairing import CROSS_MACHINE_NATS, Comparison

RELATIVE = {"C1": 0.0, "C3": 0.010, "C4": 0.0035, "C8": 0.00075, "C13": 0.0}
FLOOR_NATS = CROSS_MACHINE_NATS


def margin_nats(claim: str, c: Comparison) -> float:
    """The margin m of `claim` at comparison `c`, in nats per token: its relative margin times the mean loss of
    c's runs at their chosen lrs, or the floor."""
    losses = [r.loss for r in (*c.a_runs, *c.b_runs) if r.loss is not None]
    mean = sum(losses) / len(losses) if losses else 0.0
    return max(RELATIVE[claim] * mean, FLOOR_NATS)


def describe(claim: str) -> str:
    """The margin as the registry states it."""
    rel = RELATIVE[claim]
    floor = f"the cross-machine spread {FLOOR_NATS:g} nats"
    return f"m = {rel * 100:g}% of the comparison's mean loss, at least {floor}" if rel else f"m = {floor}"
