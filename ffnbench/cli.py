"""What every command-line entry point shares: user errors become one line on stderr and exit status 2."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from ffnbench.errors import FFNBenchError


def user_errors_exit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run `fn`; an FFNBenchError prints `ffnbench: error: <message>` and exits 2 (set FFNBENCH_TRACEBACK=1
    to see the traceback instead)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FFNBenchError as e:
            if os.environ.get("FFNBENCH_TRACEBACK"):
                raise
            print(f"ffnbench: error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
