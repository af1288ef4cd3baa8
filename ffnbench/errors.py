"""Errors a user can fix. The command-line entry points print their message (one line, no traceback) and
exit with status 2; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class FFNBenchError(Exception):
    """A problem with the user's input or environment, with a message that names it and the fix."""


class ConfigError(FFNBenchError, ValueError):
    """An impossible or unknown setting (raised at construction time, naming the config field)."""


class DataError(FFNBenchError):
    """A corpus that cannot be reached, read or used."""


class RunDirError(FFNBenchError):
    """A run directory that cannot be reused as asked (different config, unreadable checkpoint)."""

