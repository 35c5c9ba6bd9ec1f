"""The console every command prints to.

On a terminal Rich fits tables to its width. Through a pipe, a log or CI it would assume 80 columns
and wrap each cell (``7.009\\n s``), which no reader or parser of the log wants; there the console is
wide enough for any table this program prints, so each row stays on one line (whatever ``COLUMNS``
says: shells export the terminal's width, which a pipe does not have).
"""

from __future__ import annotations

import sys

from rich.console import Console

PIPE_WIDTH = 240


def make_console(**kwargs) -> Console:
    stream = kwargs.get("file") or (sys.stderr if kwargs.get("stderr") else sys.stdout)
    if "width" not in kwargs and not _is_tty(stream):
        kwargs["width"] = PIPE_WIDTH
    return Console(**kwargs)


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
