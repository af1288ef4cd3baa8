"""The Claims table's one short row per claim (DESIGN §9: read in a minute): the verdict and what undecided it, the
deciding effect with its 95% interval, the setting it was decided in, and at most two labels. Everything else stays in
the claim's own section."""

from __future__ import annotations

import re

from ffnbench.claims import ClaimResult
from ffnbench.claims.formatting import fmt_ci
from ffnbench.claims.runs import short_setting

# Labels that change how a verdict reads come first (at most two are shown): what undecided it or qualifies it
PRIORITY = ("dependent", "reverses", "sensitive", "early-training", "confounded", "not bracketed", "outside",
            "unchecked", "plateau-edge", "reduced grid")
HEADER = ["claim", "verdict", "deciding effect, 95% CI", "decided in", "labels", "n"]
MAX_ROW = 190  # characters: a row read at a glance


def _verdict(r: ClaimResult) -> str:
    """The verdict, with what undecided it in a few words ('inconclusive (init unchecked)')."""
    m = re.search(r"inconclusive \(([^)]*)\)", r.verdict.reason)
    return f"**{r.verdict.verdict}**" + (f" ({m.group(1)})" if m and r.verdict.verdict == "inconclusive" else "")


def _effect(r: ClaimResult, named: bool = True) -> str:
    """The headline interval as the effect text prints it (claims.formatting: 4 decimals, signed for a difference),
    after its short name; a claim without one, its effect text cut to a glance."""
    h = r.headline
    if h is None or not h.value.has_ci:
        text = r.effect or "n/a"
        return text if len(text) <= 60 else text[:60].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    sign = "+" if h.signed else ""
    shown = f"{h.value.mean:{sign}.4f} {fmt_ci(h.value, 4, h.signed)}"
    return f"{h.name} {shown}" if h.name and named and len(h.name) <= 25 else shown


def _labels(r: ClaimResult) -> str:
    """At most two of the deciding comparisons' labels, those that change how the verdict reads first, and one
    sensitivity cell outside the practice band at most; none the verdict column already names."""
    said = re.search(r"inconclusive \(([^)]*)\)", r.verdict.reason)
    found = [x for x in r.labels if not (said and x in said.group(1))]
    ranked = sorted(found, key=lambda x: next((i for i, p in enumerate(PRIORITY) if p in x), len(PRIORITY)))
    outside = [x for x in ranked if x.endswith("outside practice")][:1]  # one sensitivity label, the best-ranked
    return "; ".join([x for x in ranked if not x.endswith("outside practice") or x in outside][:2]) or "–"


def summary_row(r: ClaimResult) -> list[str]:
    """The claim's row of the Claims table (HEADER's columns)."""
    row = [r.claim.id, _verdict(r), _effect(r), short_setting(r.where) if r.where else "–", _labels(r),
           "–" if r.n is None else str(r.n)]
    if len(" | ".join(row)) > MAX_ROW:  # the difference's name goes first: the claim's section names it
        row[2] = _effect(r, named=False)
    return row
