"""The value checks of every config block: each returns the value as its type, or one ConfigError naming the field,
the bound and the value."""

import re
from dataclasses import dataclass

import pytest

from ffnbench.config.validate import check_known_keys, count, flag, number, real
from ffnbench.errors import ConfigError


def test_real_returns_a_float_within_its_bounds():
    assert real("x", 1, 0) == 1.0 and isinstance(real("x", 1, 0), float)
    assert real("x", 0, 0, 1) == 0.0  # a closed end holds its bound
    for value, low, high, kw, message in (
        (0, 0, None, {"low_open": True}, "x: must be > 0, got 0"),
        (-1, 0, None, {}, "x: must be ≥ 0, got -1"),
        (1, 0, 1, {"high_open": True}, "x: must be in [0, 1), got 1"),
        (0, 0, 1, {"low_open": True, "high_open": True}, "x: must be in (0, 1), got 0"),
        (True, None, None, {}, "x: expected a number, got True"),
        (float("nan"), None, None, {}, "x: expected a number, got nan"),
        ("1", None, None, {"fix": " (a hint)"}, "x: expected a number, got '1' (a hint)"),
    ):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            real("x", value, low, high, **kw)


def test_count_takes_integers_from_its_lower_bound_and_null_when_optional():
    assert count("n", 3) == 3 and count("n", 0, low=0) == 0 and count("n", None, optional=True) is None
    for value, kw, message in ((0, {}, "n: must be a positive integer, got 0"),
                               (-1, {"low": 0}, "n: must be an integer ≥ 0, got -1"),
                               (2.0, {}, "n: must be a positive integer, got 2.0"),
                               (True, {}, "n: must be a positive integer, got True"),
                               (None, {}, "n: must be a positive integer, got None"),
                               (0, {"optional": True}, "n: must be a positive integer or null, got 0")):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            count("n", value, **kw)


def test_flag_and_number():
    assert flag("f", False) is False
    with pytest.raises(ConfigError, match="^f: expected true or false, got 1$"):
        flag("f", 1)
    assert number("r", "8/3") == pytest.approx(8 / 3) and number("r", 4) == 4.0 and number("r", None) is None
    with pytest.raises(ConfigError, match=r"^r: expected a number \(e.g. 4 or 8/3\), got 'wide'$"):
        number("r", "wide")


def test_a_block_may_only_have_the_keys_of_its_dataclass():
    @dataclass
    class Block:
        a: int = 0
        b: int = 0

    check_known_keys("block", {"a": 1}, Block)
    with pytest.raises(ConfigError, match="^block.c: unknown setting; block has: a, b$"):
        check_known_keys("block", {"a": 1, "c": 2}, Block)
