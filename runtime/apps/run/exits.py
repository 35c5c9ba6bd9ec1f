"""How a command ends: its exit status, and the one line on stderr that says why it is not 0.

0 success; 1 a run that failed (or a check it ran: greedy outputs that differ, metrics not reproduced);
2 bad input (no process started); 128 + the signal's number for a run stopped by one: 130 Ctrl-C, 143 SIGTERM.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

from rich.console import Console

from .report import print_record

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143  # 128 + SIGINT / SIGTERM


def exit_now(code: int) -> NoReturn:
    """End the command with `code`, skipping the interpreter's teardown (with torch and transformers
    loaded it takes ~1 s of a 2-core CPU): the exit handlers still run (atexit: an engine nobody closed
    stops its processes) and Python's streams are flushed.

    What a normal exit does and this does not: wait for non-daemon threads (and run threading's own exit
    hooks, e.g. concurrent.futures'), and flush C stdio buffers. Every thread the runtime starts is a
    daemon and it uses no executor; a thread or pool that must finish needs joining before main returns."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a reader that has gone (`| head`), a closed stream
            pass
    os._exit(code)


def fail(message: str) -> None:
    print(f"specsched: error: {message}", file=sys.stderr)


def stopped_status(signal_name: str | None) -> int:
    """The exit status of a run stopped by a signal: 128 + its number (143 SIGTERM, 130 Ctrl-C)."""
    return EXIT_TERMINATED if signal_name == "SIGTERM" else EXIT_INTERRUPTED


def finish(record, console: Console, *, texts: bool = True) -> int:
    """Print a run's record (its texts unless `texts` is off) and return the status it ends the command with."""
    print_record(record, console, texts=texts)
    if record.status == "failed":
        fail(record.error or "run failed")
        return EXIT_FAILED
    if record.status == "interrupted":
        fail(f"{record.error}; the tokens verified so far are shown above")
        return stopped_status(record.stopped_by)
    return 0
