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


def print_wrote(console: Console, line: str, style: str | None = None) -> None:
    """A line naming files just written ("wrote PATH ..."): the path stays on one line to copy, however deep
    and the console narrow (soft_wrap), and a '[' in it is text, not markup."""
    console.print(line, style=style, highlight=False, markup=False, soft_wrap=True)


def replace_what_the_output_cannot_encode() -> None:
    """Under a locale whose encoding is not UTF-8 (an ISO-8859-1 one, or LANG=C with PYTHONUTF8=0) the
    program's · α │ would end a run in UnicodeEncodeError, even ``--help``: there each such character is
    written as '?' instead."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "")
        if encoding not in ("utf8", "utf8sig") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
