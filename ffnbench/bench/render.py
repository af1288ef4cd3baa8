"""How a benchmark's record (what its JSON file holds) is printed on the terminal: the cells its tables share
(median ± IQR/2, a goal, a speed-up), the padded table, and the block of a title, its tables and its notes. Every
number goes through tables.fmt and every table through tables.markdown_table, as in the report; each benchmark
module's `tables(record)` lays out its own columns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ffnbench.tables import MISSING, fmt, markdown_table


def median_iqr(s: Mapping[str, Any] | None, spec: str = ".4g") -> str:
    """A `timing.quartiles` summary as 'median ± IQR/2' (MISSING when there is none)."""
    if not s:
        return MISSING
    return f"{fmt(s['median'], spec)} ± {fmt(s['iqr'] / 2, '.2g')}"


def goal(met: bool, text: str) -> str:
    """A goal's cell: its text (e.g. '≥ 0.95'), then met or NOT met."""
    return f"{text} {'met' if met else 'NOT met'}"


def speedup(s: Mapping[str, Any] | None) -> str:
    """A ratio summary's median as '1.23×' (MISSING when there is none)."""
    return fmt(s["median"], ".2f") + "×" if s else MISSING


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A markdown table, its columns padded to line up on the terminal."""
    return "\n".join(markdown_table(header, rows, pad=True))


def block(title: str, tables: Iterable[str], notes: Iterable[str] = ()) -> str:
    """What is printed for one benchmark: '## <title>', its table(s), then its notes indented."""
    lines = [f"\n## {title}\n", "\n\n".join(tables)]
    lines += [f"  {note}" for note in notes]
    return "\n".join(lines)
