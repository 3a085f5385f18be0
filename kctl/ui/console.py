"""The Rich consoles commands print through: full width when the output is not a terminal.

A Rich console that writes to a pipe or a file assumes 80 columns, so tables get cut
(``ApiVer…``) and long lines wrap in the middle of a value. Piped output is read by
programs and people with wide windows, so there it has no width limit: tables are as
wide as their content and lines are never wrapped (``soft_wrap``).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

__all__ = ["PIPE_WIDTH", "stderr_console", "stdout_console"]

#: The width a console assumes on a pipe: wide enough that no table is ever cut.
PIPE_WIDTH = 100_000


def _console(stream: Any, stderr: bool, **kwargs: Any) -> Console:
    if stream.isatty():
        return Console(stderr=stderr, **kwargs)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True, **kwargs)


def stdout_console(**kwargs: Any) -> Console:
    return _console(sys.stdout, False, **kwargs)


def stderr_console(**kwargs: Any) -> Console:
    return _console(sys.stderr, True, **kwargs)
