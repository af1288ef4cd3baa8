"""The Claims table's one short row per claim (DESIGN §9: read in a minute): the verdict and what undecided it, the
deciding effect with its 95% interval, the setting it was decided in, and at most two labels. Everything else stays in
the claim's own section."""

from __future__ import annotations

import re

from ffnbench.claims import ClaimResult
from ffnbench.claims.runs import short_setting

# Labels that change how a verdict reads come first (at most two are shown): what undecided it or qualifies it
PRIORITY = ("dependent", "reverses", "sensitive", "early-training", "confounded", "not bracketed", "outside",
            "unchecked", "plateau-edge", "reduced grid")
INTERVAL = re.compile(r"([+\-−]?\d+\.\d+)(?: (?:nats|bpb))?, 95% CI \[([+\-−]?\d+\.\d+), ([+\-−]?\d+\.\d+)\]")
HEADER = ["claim", "verdict", "deciding effect, 95% CI", "decided in", "labels", "n"]
MAX_ROW = 190  # characters: a row read at a glance


def _verdict(r: ClaimResult) -> str:
    """The verdict, with what undecided it in a few words ('inconclusive (init unchecked)')."""
    m = re.search(r"inconclusive \(([^)]*)\)", r.verdict.reason)
    return f"**{r.verdict.verdict}**" + (f" ({m.group(1)})" if m and r.verdict.verdict == "inconclusive" else "")


def _effect(r: ClaimResult, named: bool = True) -> str:
    m = INTERVAL.search(r.effect or "")
    if m is None:
        text = r.effect or "n/a"
        return text if len(text) <= 60 else text[:60].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    mean, low, high = m.groups()  # as the effect prints them (signed for a difference, not for a fraction)
    what = (r.effect or "")[:m.start()].split(";")[-1].strip().rstrip("=: ").strip()
    what = what if len(what) <= 25 else what.rsplit(":", 1)[-1].strip()  # "loss(relu) − loss(swish): 2 layers"
    what = what if len(what) <= 25 and named else ""
    return f"{what + ' ' if what else ''}{mean} [{low}, {high}]"


def _labels(r: ClaimResult) -> str:
    found: list[str] = []
    for group in re.findall(r"\[([^\]]*[a-z][^\]]*)\]", r.effect or ""):
        for x in (x.strip() for x in group.split(",")):
            if x == "outside practice" and found:  # "reverses at init std 0.16, outside practice" is one label
                found[-1] += f", {x}"
            elif x and not re.match(r"^[+\-−]?\d", x):
                found.append(x)
    said = re.search(r"inconclusive \(([^)]*)\)", r.verdict.reason)  # a label the verdict column already names
    found = [x for x in dict.fromkeys(found) if not (said and x in said.group(1))]
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
