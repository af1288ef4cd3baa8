"""The checks every config block makes of its values: a number in a range, a count, a flag, the keys a block may
have. Each returns the value as its type, or raises one ConfigError naming the field (`optim.lr`, `data.max_docs`)
and what it must be."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from ffnbench.errors import ConfigError


def real(field: str, value: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
         high_open: bool = False, fix: str = "") -> float:
    """`value` as a float within [low, high] (either end open or absent), or a ConfigError naming `field`.

    Args:
        field: the dotted config key, for the message.
        value: what the config gave (a bool is not a number).
        low, high: the bounds; None leaves that end open-ended.
        low_open, high_open: exclude the bound itself.
        fix: appended to the message (how to put it right).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{field}: expected a number, got {value!r}{fix}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        if high is None:
            bound = f"{'>' if low_open else '≥'} {low:g}"
        else:
            bound = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(f"{field}: must be {bound}, got {value!r}{fix}")
    return float(value)


def count(field: str, value: Any, low: int = 1, *, optional: bool = False) -> int | None:
    """`value` as an int ≥ `low` (None too when `optional`), or a ConfigError naming `field`."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        what = "a positive integer" if low == 1 else f"an integer ≥ {low}"
        raise ConfigError(f"{field}: must be {what}{' or null' if optional else ''}, got {value!r}")
    return value


def flag(field: str, value: Any) -> bool:
    """`value` as a bool: true or false, nothing that merely converts to one."""
    if not isinstance(value, bool):
        raise ConfigError(f"{field}: expected true or false, got {value!r}")
    return value


def number(field: str, value: Any) -> float | None:
    """A number given as a number or as text (`ffn.budget=8/3` on the command line arrives as a string); None
    stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            num, _, den = value.partition("/")
            value = float(num) / float(den) if den else float(num)
        except ValueError:
            raise ConfigError(f"{field}: expected a number (e.g. 4 or 8/3), got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field}: expected a number, got {value!r}")
    return float(value)


def check_known_keys(group: str, node: Iterable[str], cls: type) -> None:
    """A config block's keys must be fields of the dataclass it is read into: a misspelled key is a ConfigError
    naming it and the keys the block has, not a default silently kept."""
    known = [f.name for f in fields(cls)]
    unknown = [k for k in node if k not in known]
    if unknown:
        raise ConfigError(f"{group}.{unknown[0]}: unknown setting; {group} has: {', '.join(known)}")
