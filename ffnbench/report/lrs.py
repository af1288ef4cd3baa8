"""REPORT.md's "Learning rates" section: for each variant whose lr was tuned (ffnbench.sweep.tuning), the lrs its
tuning runs tried, their median final loss, instabilities and divergences, the lr chosen (lr_protocol.best_lr, the
rule `make sweep` applied) and why; an lr at the edge of its grid is named "optimum not bracketed", since a better
one may lie beyond."""

from __future__ import annotations

from ffnbench.claims import Run, describe_setting, group_by
from ffnbench.claims.lr_protocol import best_lr, describe_choice, median_losses, tuning_key
from ffnbench.report.comparisons import variant_order
from ffnbench.report.instabilities import instabilities
from ffnbench.tables import markdown_table

HEADER = ["variant", "setting", "lrs tried: median final loss (nats) over tuning seeds", "chosen lr", "why"]


def lr_section(runs: list[Run]) -> list[str]:
    """The section's markdown lines; none when no run of the sweep is a tuning run."""
    tuning = [r for r in runs if r.role == "tuning"]
    if not tuning:
        return []
    rows = []
    groups = group_by(tuning, tuning_key)
    for key in sorted(groups, key=lambda k: (str(k[0]), variant_order(groups[k][0]))):
        group = groups[key]
        try:
            lr = best_lr(group)
            chosen, reason = f"**{lr:g}**", describe_choice(group, lr)
        except ValueError:
            div = sum(r.diverged for r in group)
            other = f", {len(group) - div} failed or other" if len(group) > div else ""
            chosen, reason = "none", (f"no lr with a finite median ({div} of {len(group)} tuning runs "
                                      f"diverged{other}): its judged runs cannot run")
        medians = median_losses(group)
        tried = []
        for x in sorted({r.lr for r in group}):
            at = [r for r in group if r.lr == x]
            div = sum(r.diverged for r in at)
            other = sum(not r.usable and not r.diverged for r in at)  # failed or unfinished: no loss, not a divergence
            unstable = sum(bool(instabilities(r)) and not r.diverged for r in at)
            counted = ((div, "diverged"), (unstable, "unstable"), (other, "failed or other"))
            notes = [f"{k} {what}" for k, what in counted if k]
            med = medians.get(x)
            shown = "n/a" if med is None else ("∞" if med == float("inf") else f"{med:.3f}")
            tried.append(f"{x:g}: {shown} (n={len(at)})" + (f" ({', '.join(notes)})" if notes else ""))
        rows.append([group[0].label, describe_setting(group[0].setting), "; ".join(tried), chosen, reason])
    return ["## Learning rates", "",
            "Each variant marked here was judged at the lr its own tuning runs chose (seeds that are never judged), "
            "then compared on fresh seeds: the lr with the lowest median final loss over its tuning seeds, a diverged "
            "seed counting as +∞ (ffnbench/claims/lr_protocol.py). \"unstable\": a tuning run with a plateau or a "
            "spike (Instabilities below).", "",
            *markdown_table(HEADER, rows), ""]
