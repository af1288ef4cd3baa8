"""C7: the FFN biases can be dropped (docs/claims.md §C7): a non-inferiority test per activation, without
against with biases at a matched budget, in bits per byte.

The margin is in bits per byte so that it means the same under every tokenizer (nats per token scale with the
bytes a token covers). Where the runs recorded their final validation loss per window (RunResult.val_windows),
the interval is a hierarchical bootstrap over seeds and validation windows (stats.bootstrap): the
validation set is a fixed sample, and its sampling noise is of the order of the margin. Otherwise it is the t
interval over seeds, which leaves that noise out, and the evidence says so."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

import numpy as np

import ffnbench.claims.robust as robust
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.pairing import Comparison, PairKey, compare_sides, paired_difference, primary, window_losses
from ffnbench.claims.runs import Run
from ffnbench.stats.intervals import Paired
from ffnbench.stats.verdicts import Verdict, verdict_below

# Bits per byte: a cost below this is "can be dropped". It is the former 0.01 nats/token at the byte tokenizer
# of the CPU presets (one token = one byte: 0.01 / ln 2 = 0.0144 bpb), rounded up to 0.015, about 0.5% of the
# quick sweep's ~3 bpb; and it stays above the cross-machine spread of identical runs (up to 0.009 nats/byte =
# 0.013 bpb, docs/runs.md), below which a difference is not a finding at all.
BIAS_MARGIN_BPB = 0.015


def bias_free_key(r: Run) -> PairKey | None:
    """Everything but the bias and the lr held fixed, at a matched budget."""
    if r.budget_ratio is None:
        return None
    return PairKey(r.setting, act=r.act, budget=r.budget_ratio, multiple_of=r.multiple_of)


def _tps_range(runs: Iterable[Run]) -> str:
    """Median tokens/s of the runs with their range: a sweep's throughput is load as much as the model."""
    values = sorted(r.tokens_per_s for r in runs if r.usable and r.tokens_per_s is not None)
    if not values:
        return "n/a"
    return f"{statistics.median(values):,.0f} (range {values[0]:,.0f}–{values[-1]:,.0f})"


def window_bpb(r: Run) -> np.ndarray | None:
    """The run's final validation loss per window in bits per byte, or None when it did not record them.
    A run converts nats/token to bits/byte with one factor (its tokens' mean bytes), so each window scales by
    final_val_bpb / final_val_loss."""
    windows = window_losses(r)
    if windows is None or r.bpb is None or not r.loss:
        return None
    return windows * (r.bpb / r.loss)


# the nested interval (claims.robust.nested) in bits per byte: a run's windows scale by final_val_bpb / final_val_loss
BPB = robust.Unit("bpb", lambda r: r.bpb / r.loss if r.bpb is not None and r.loss else math.nan)


def bpb_cost(c: Comparison) -> tuple[Paired, str]:
    """bpb(no bias) − bpb(bias) and the noise model of its interval: the interval with the lr choice in it where the
    comparison carries one (claims.robust.nested, in BPB), else over the seeds where both finished
    (pairing.paired_difference, in bits per byte)."""
    if c.interval is not None:
        return c.interval
    return paired_difference(c.a_runs, c.b_runs, lambda r: r.bpb, window_bpb)


def c7(obs: Observations) -> Evidence:
    ev = Evidence()
    comps = compare_sides(obs.with_neighbours, lambda r: r.bias, lambda r: not r.bias, bias_free_key,
                          ("bias", "no bias"))
    for act in sorted({c.key.act for c in comps}):
        mine = [c for c in comps if c.key.act == act]
        best = primary(mine, obs.base_setting)
        ev.where = ev.where or best.key.setting
        checked = robust.check(best, mine, _rule, f"{act}: loss(no bias) − loss(bias)", _margin_side(best), BPB)
        cost, noise = bpb_cost(checked.deciding or best)
        ev.parts.append((f"{act}: dropping biases costs < {BIAS_MARGIN_BPB:g} bpb", checked.verdict))
        ev.add_unchecked(checked.missing)
        ev.n = min_n(ev.n, best.n)
        ev.effect += (f"{'; ' if ev.effect else ''}{act}: bpb(no bias) − bpb(bias) = "
                      f"{fmt_interval(cost, unit='bpb')} ({noise})"
                      + (f" [{', '.join(checked.labels)}]" if checked.labels else ""))
        ev.note("bpb(no bias) − bpb(bias)", cost, checked.labels)
        ev.details += [f"- {act}: {checked.summary()} (deciding comparison, {best.where})", *checked.lines]
        for c in mine:
            ev.details += c.evidence(f"{act}: loss(no bias) − loss(bias)", c is best)
            if c is best:
                ev.details += [f"  - deciding, in bits per byte: {fmt_interval(cost, unit='bpb')}; noise: {noise}",
                               f"  - tokens/s with bias {_tps_range(c.a_runs)}, without {_tps_range(c.b_runs)}: "
                               "not a comparison (a sweep's throughput is machine load; `make bench` times the "
                               "variants side by side)"]
    return ev


def _margin_side(c: Comparison):
    """Which side of the margin a cost in nats/token falls on (−1 below, +1 above), at the comparison's bits per
    byte per nat: C7's lr and length checks ask whether a shared-lr cost falls where the best-vs-best one does, not
    whether two costs near zero share a sign."""
    runs = [r for r in (*c.a_runs, *c.b_runs) if r.bpb is not None and r.loss]
    per_nat = sum(r.bpb / r.loss for r in runs) / len(runs) if runs else 1 / math.log(2)
    return lambda d: (d * per_nat > BIAS_MARGIN_BPB) - (d * per_nat < BIAS_MARGIN_BPB)


def _rule(c: Comparison) -> Verdict:
    """C7's verdict of one comparison: Comparison.verdict applies the budget and divergence rules first; the rule
    then judges its bpb cost against the margin."""
    cost, _ = bpb_cost(c)
    return c.verdict(lambda _, d=cost: verdict_below(d, BIAS_MARGIN_BPB), b_worse_supports=False)


def margin_in_nats(bytes_per_token: float = 1.0) -> float:
    """BIAS_MARGIN_BPB in nats per token for a tokenizer whose tokens cover `bytes_per_token` bytes on average
    (1 for the byte tokenizer): for reading the margin against the loss tables."""
    return BIAS_MARGIN_BPB * math.log(2) * bytes_per_token
