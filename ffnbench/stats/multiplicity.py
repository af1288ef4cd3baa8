"""A claim made of parts: Holm's correction for multiplicity over the parts, then their conjunction."""

from __future__ import annotations

from collections.abc import Sequence

from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

FAMILY_ALPHA = 0.05  # family-wise error rate over the parts of one claim
MULTIPLICITY = f"Holm over a claim's parts, family α = {FAMILY_ALPHA:g}"


def holm(parts: Sequence[tuple[str, Verdict]], alpha: float = FAMILY_ALPHA) -> list[tuple[str, Verdict]]:
    """Holm's step-down procedure over the parts that carry a p-value (m of them): sorted by p, the i-th
    (from 1) keeps its decision only if it and every smaller one pass 2·p ≤ alpha/(m − i + 1) — 2·p being
    the two-sided equivalent of the 95% interval that decided. A decision that does not survive becomes
    inconclusive, saying so. Parts without a p-value (exact, analytic, no interval) are not tested and not
    counted; with m < 2 there is nothing to correct and the parts come back unchanged."""
    tested = sorted((i for i, (_, v) in enumerate(parts) if v.p_value is not None), key=lambda i: parts[i][1].p_value)
    m, out, stop = len(tested), list(parts), None  # stop: (2p, threshold) of the part where Holm stopped
    if m < 2:
        return out
    for rank, i in enumerate(tested):
        label, v = parts[i]
        p2, need = min(1.0, 2 * v.p_value), alpha / (m - rank)  # type: ignore[operator]
        if stop is None and p2 > need:
            stop = (p2, need)
        if stop is None:
            continue
        why = f"needs ≤ {need:.2g}" if stop == (p2, need) else \
            f"Holm stopped at a part with p = {stop[0]:.2g} > {stop[1]:.2g}"
        if v.verdict != INCONCLUSIVE:
            out[i] = (label, Verdict(INCONCLUSIVE, f"{v.reason}, but not significant after Holm over {m} parts "
                                                   f"(p = {p2:.2g}, {why})", v.p_value))
        elif "(would be " in v.reason:  # an undecided part's reading where it ran is held to the same correction
            out[i] = (label, Verdict(INCONCLUSIVE, f"{v.reason}; that reading is not significant after Holm over "
                                                   f"{m} parts either (p = {p2:.2g}, {why})", v.p_value))
    return out


def combine(parts: list[tuple[str, Verdict]]) -> Verdict:
    """A claim made of several parts is their conjunction, after a multiplicity correction (MULTIPLICITY:
    Holm over the parts that carry a p-value, family α = 0.05, see `holm`): without it, "contradicted if any
    part is" over four parts would contradict a true claim far more often than 5% of the time. Then:
    contradicted if any part is contradicted, supported if every part is supported, inconclusive otherwise
    (including when there are no parts)."""
    if not parts:
        return Verdict(INCONCLUSIVE, "nothing to test")
    parts = holm(parts)
    bad = [f"{label}: {v.reason}" for label, v in parts if v.verdict == CONTRADICTED]
    if bad:
        return Verdict(CONTRADICTED, "; ".join(bad))
    open_ = [f"{label}: {v.reason}" for label, v in parts if v.verdict == INCONCLUSIVE]
    if open_:
        return Verdict(INCONCLUSIVE, "; ".join(open_))
    return Verdict(SUPPORTED, "; ".join(f"{label}: {v.reason}" for label, v in parts))
