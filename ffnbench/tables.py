"""One number formatter and one table renderer, shared by the report, the claims and the benchmarks, so a
missing value prints the same dash everywhere and every table has the same shape."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

MISSING = "–"  # what a missing or non-finite number prints as, everywhere


def fmt(x: Any, spec: str = ".3g") -> str:
    """A number with a format spec; None, NaN and inf print as MISSING; anything else as str()."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return MISSING
    if isinstance(x, int | float) and not isinstance(x, bool):
        return format(x, spec)
    return str(x)


def cell(text: Any) -> str:
    """Markdown table cells cannot hold a bare '|' or a newline."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]], pad: bool = False) -> list[str]:
    """A markdown table as lines. `pad` aligns the columns for a terminal (first column left, the rest right);
    unpadded is what REPORT.md holds."""
    cells = [[cell(c) for c in header]] + [[cell(c) for c in row] for row in rows]
    if not pad:
        return (["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(header)]
                + ["| " + " | ".join(r) + " |" for r in cells[1:]])
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
              for r in cells[1:]]
    return lines
