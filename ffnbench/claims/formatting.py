"""How the claims and the report write an effect: a mean with its 95% interval and p-value, or why there is
none. Plain numbers go through ffnbench.tables.fmt, so a missing one prints the same dash everywhere."""

from __future__ import annotations

from ffnbench.stats.intervals import Paired, Summary
from ffnbench.tables import MISSING, fmt


def na(n: int) -> str:
    """Why there is no interval: no finished run, a single seed, or seeds that all gave the same value (a zero
    spread is no estimate of the noise, ffnbench.stats)."""
    if n == 0:
        return "n/a (no finished run)"
    return "n/a (1 seed)" if n == 1 else "n/a (identical at every seed)"


def fmt_p(p: float | None) -> str:
    """A p-value to two significant digits; below 1e-4 as '< 1e-4'."""
    return "< 1e-4" if p is not None and p < 1e-4 else fmt(p, ".2g")


def fmt_ci(s: Summary | Paired, digits: int = 4, signed: bool = False) -> str:
    """'[low, high]', or why there is no interval."""
    sign = "+" if signed else ""
    return f"[{s.ci_low:{sign}.{digits}f}, {s.ci_high:{sign}.{digits}f}]" if s.has_ci else na(s.n)


def fmt_interval(x: Paired | Summary, unit: str = "nats", digits: int = 4, signed: bool = True) -> str:
    """'+0.0123 nats, 95% CI [+0.0040, +0.0206], p = 0.012' — or why there is no interval."""
    if x.n == 0 or x.mean is None:
        return na(0)
    sign = "+" if signed else ""
    text = f"{x.mean:{sign}.{digits}f} {unit}".rstrip() + f", 95% CI {fmt_ci(x, digits, signed)}"
    if not x.has_ci:
        return text
    if isinstance(x, Paired) and x.p_value is not None:
        text += f", p {'' if x.p_value < 1e-4 else '= '}{fmt_p(x.p_value)}"
        text += " (Welch, unpaired)" if x.method == "welch" else ""
    return text


def fmt_mean_std(s: Summary, digits: int = 4) -> str:
    """'mean ± std' over the seeds; 'mean ± n/a' for one seed; the dash for none."""
    if s.n == 0:
        return MISSING
    return f"{s.mean:.{digits}f} ± {s.std:.{digits}f}" if s.std is not None else f"{s.mean:.{digits}f} ± n/a"
