"""What every figure shares: matplotlib without a display, saving a figure, an error bar's half-width, and
the few words a legend gives a line or a setting."""

from __future__ import annotations

from pathlib import Path

from ffnbench.stats.intervals import Summary


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def save(fig, out: Path, name: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    pyplot().close(fig)
    return name


def error_bar(s: Summary) -> float:
    """Half-width of the 95% interval for an error bar; 0 where there is none (one seed)."""
    return (s.ci_high - s.mean) if s.has_ci else 0.0


def varying_labels(keys: list[tuple]) -> list[str]:
    """Labels for lines that differ in several factors: only the factors that actually differ."""
    names = [[str(v) if k in ("act", "setting") else f"{k} {v}" for k, v in key] for key in keys]
    differ = [i for i in range(len(names[0])) if len({n[i] for n in names}) > 1] if names else []
    return [", ".join(n[i] for i in differ) for n in names]
