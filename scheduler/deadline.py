"""A deadline on policy code: a plug-in whose ``pick`` (or ``served``, or constructor) does not return
within ``--policy-timeout`` seconds is stopped, and the jobs it schedules fail like those of a policy that
raised, with every token verified so far kept.

Heartbeats cannot catch this: they come from a thread of their own, so a verifier stuck in a policy's
loop still beats. The policy runs in the verifier's main thread, so a real-time interval timer
(``SIGALRM``) interrupts it there: a Python loop at its next bytecode, a sleep or a blocking read at
once. A call into C that never returns to Python (one long numpy operation) is stopped only when it does.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Overrun(BaseException):
    """Policy code ran past its deadline. A BaseException, so that a policy's own ``except Exception``
    cannot swallow it."""


def overran(policy: str, method: str, seconds: float) -> str:
    """The error line of a policy stopped by its deadline."""
    return f"policy {policy!r}: {method} did not return within {seconds:g} s (--policy-timeout), so it was stopped"


@contextmanager
def deadline(seconds: float):
    """Raise Overrun in the body once `seconds` of wall time have passed. A no-op off the main thread (a
    signal handler runs only there), where SIGALRM does not exist, or for seconds <= 0."""
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = True

    def expired(signum, frame):
        if armed:  # a signal handled after the body ended is not the body's
            raise Overrun

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
