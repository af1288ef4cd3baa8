"""C7: the FFN biases can be dropped (docs/claims.md §C7): an equivalence test per activation, with and
without biases at a matched budget."""

from __future__ import annotations

from collections.abc import Iterable

from ffnbench import stats
from ffnbench.claims.claim import Evidence, Observations, min_n
from ffnbench.claims.formatting import fmt_interval
from ffnbench.claims.pairing import PairKey, compare_sides, primary
from ffnbench.claims.runs import Run

BIAS_MARGIN = 0.01  # nats: a loss cost smaller than this is "can be dropped"


def bias_free_key(r: Run) -> PairKey | None:
    """Everything but the bias and the lr held fixed, at a matched budget."""
    if r.budget_ratio is None:
        return None
    return PairKey(r.setting, act=r.act, budget=r.budget_ratio, multiple_of=r.multiple_of)


def _mean_tps(runs: Iterable[Run]) -> str:
    s = stats.summarize(r.tokens_per_s for r in runs if r.usable and r.tokens_per_s is not None)
    return f"{s.mean:,.0f}" if s.n else "n/a"


def c7(obs: Observations) -> Evidence:
    ev = Evidence()
    comps = compare_sides(obs.runs, lambda r: r.bias, lambda r: not r.bias, bias_free_key, ("bias", "no bias"))
    for act in sorted({c.key.act for c in comps}):
        mine = [c for c in comps if c.key.act == act]
        best = primary(mine, obs.base_setting)
        ev.parts.append((f"{act}: dropping biases costs < {BIAS_MARGIN:g} nats",
                         best.verdict(lambda d: stats.verdict_below(d, BIAS_MARGIN))))
        ev.n = min_n(ev.n, best.diff.n)
        ev.effect += f"{'; ' if ev.effect else ''}{act}: loss(no bias) − loss(bias) = {fmt_interval(best.diff)}"
        ev.details += [c.line(f"{act}: loss(no bias) − loss(bias)", c is best) for c in mine]
        ev.details.append(f"  - tokens/s with bias {_mean_tps(best.a_runs)}, without {_mean_tps(best.b_runs)}")
    return ev
