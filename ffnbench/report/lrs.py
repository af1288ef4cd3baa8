"""REPORT.md's "Learning rates" section: for each variant whose lr was tuned (ffnbench.tuning), the lrs its
tuning runs tried, their mean final loss and divergences, the lr chosen (claims.pairing.best_lr, the rule
`make sweep` applied) and why; an lr at the edge of its grid is flagged, since a better one may lie beyond."""

from __future__ import annotations

from ffnbench.claims import Run, describe_setting, group_by, summary_of
from ffnbench.claims.formatting import fmt_mean_std
from ffnbench.claims.pairing import best_lr, tuning_key
from ffnbench.claims.runs import outcomes_by_seed
from ffnbench.report.comparisons import variant_order
from ffnbench.tables import markdown_table

HEADER = ["variant", "setting", "lrs tried: mean final loss (nats) over tuning seeds", "chosen lr", "why"]


def why(runs: list[Run], lr: float) -> str:
    """The reason best_lr gives for `lr`: the lowest mean loss, with divergences ranked first (said so when they
    decided: an lr with a lower mean loss had more diverged seeds); the grid edge."""
    lrs = sorted({r.lr for r in runs})
    diverged = {x for x in lrs if any(r.diverged for r in outcomes_by_seed(r for r in runs if r.lr == x).values())}
    seeds = sorted({r.seed for r in runs})
    mean = {x: summary_of(r for r in runs if r.lr == x).mean for x in lrs}
    beaten = [x for x in lrs if mean[x] is not None and mean[lr] is not None and mean[x] < mean[lr]]
    if not beaten:
        among = ""
    elif lr in diverged:  # the chosen lr diverged too: a smaller share of divergences decided
        among = " among the lrs with the smallest share of diverged seeds,"
    else:
        among = " among the lrs where no seed diverged,"
    reason = f"lowest mean final loss{among} over tuning seeds {', '.join(map(str, seeds))}"
    if diverged:
        reason += f"; lrs where a seed diverged rank last ({', '.join(f'{x:g}' for x in sorted(diverged))})"
    if len(lrs) > 1 and lr in (lrs[0], lrs[-1]):
        reason += f" — **at the {'lower' if lr == lrs[0] else 'upper'} edge of the grid**: a better lr may lie beyond"
    return reason


def lr_section(runs: list[Run]) -> list[str]:
    """The section's markdown lines; none when no run of the sweep is a tuning run."""
    tuning = [r for r in runs if r.role == "tuning"]
    if not tuning:
        return []
    rows = []
    groups = group_by(tuning, tuning_key)
    for key in sorted(groups, key=lambda k: (str(k[0]), variant_order(groups[k][0]))):
        group = groups[key]
        if not any(r.usable for r in group):
            div = sum(r.diverged for r in group)
            other = f", {len(group) - div} failed or other" if len(group) > div else ""
            chosen, reason = "none", f"no finished tuning run ({div} diverged{other}): its judged runs cannot run"
        else:
            lr = best_lr(group)
            chosen, reason = f"**{lr:g}**", why(group, lr)
        tried = []
        for x in sorted({r.lr for r in group}):
            at = [r for r in group if r.lr == x]
            div = sum(r.diverged for r in at)
            other = sum(not r.usable and not r.diverged for r in at)  # failed or unfinished: no loss, not a divergence
            notes = [f"{k} {what}" for k, what in ((div, "diverged"), (other, "failed or other")) if k]
            tried.append(f"{x:g}: {fmt_mean_std(summary_of(at))}" + (f" ({', '.join(notes)})" if notes else ""))
        rows.append([group[0].label, describe_setting(group[0].setting), "; ".join(tried), chosen, reason])
    return ["## Learning rates", "",
            "Each variant marked here was judged at the lr its own tuning runs chose (seeds that are never judged), "
            "then compared on fresh seeds: the lr protocol of each comparison is in its evidence.", "",
            *markdown_table(HEADER, rows), ""]
