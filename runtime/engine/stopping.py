"""Ctrl-C and SIGTERM for the command line: the first stops the run, the second cannot lose what it verified.

The first Ctrl-C (or SIGTERM) raises KeyboardInterrupt (or Interrupted) in the main thread. The run then
stops every process, and its record keeps every token verified so far: it is printed and written to
`--json`. A second signal would cut that short and lose the record. It comes from a user who presses
Ctrl-C twice, and from `timeout`, which signals both its child and the child's process group, so the
second one says, in one line, what is happening and is otherwise ignored. A third one raises again, so a
teardown that hangs can still be left (the record is then lost, as the line said).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

from .collected import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REASONS = {"SIGINT": "interrupted (Ctrl-C)", "SIGTERM": "interrupted (SIGTERM)"}  # the error of a job it stops
STOPPING_LINE = "specsched: stopping, keeping what was done so far (one more Ctrl-C leaves at once and loses it)"


class StopSignals:
    """The handler of SIGINT and SIGTERM while `stop_signals()` is on (the module's docstring)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame) -> None:
        self.count += 1
        if self.count == 2:
            print(STOPPING_LINE, file=sys.stderr, flush=True)
            return
        raise Interrupted() if signum == signal.SIGTERM else KeyboardInterrupt()


def stopped_by(exc: BaseException) -> tuple[str, str]:
    """The signal a KeyboardInterrupt or Interrupted stands for, and the error of what it stopped:
    ("SIGINT", "interrupted (Ctrl-C)") or ("SIGTERM", "interrupted (SIGTERM)")."""
    name = "SIGTERM" if isinstance(exc, Interrupted) else "SIGINT"
    return name, REASONS[name]


def handles_stops() -> bool:
    """Whether `stop_signals()` is on: then nothing below it installs signal handlers of its own."""
    return isinstance(signal.getsignal(signal.SIGTERM), StopSignals)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM handled as the module's docstring says while the block runs, then the handlers
    before it are put back. That includes an ignored SIGINT: a shell without job control starts a
    background job (`specsched run ... &` in a script) with SIGINT ignored, and a run owns process trees, so
    Ctrl-C must reach it all the same. Only from the main thread, the only one that may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = StopSignals()
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, signal.SIG_DFL if before is None else before)  # None: set outside Python
