"""A deadline on policy code: a plug-in whose ``pick`` (or ``served``, or constructor) does not return
within ``--policy-timeout`` seconds is stopped, and the jobs it schedules fail like those of a policy that
raised, with every token verified so far kept.

Heartbeats cannot catch this: they come from a thread of their own, so a verifier stuck in a policy's
loop still beats. The policy runs in the verifier's main thread, so a real-time interval timer
(``SIGALRM``) interrupts it there: a Python loop at its next bytecode, a sleep or a blocking read at
once. A call into C that never returns to Python (one long numpy operation) is stopped only when it does.

A body that swallows the Overrun (a policy's bare ``except:`` or ``except BaseException``) and goes on past
a further grace period (the deadline again, at least a second) cannot be stopped from inside Python: the
process reports what it can (``when_swallowed``: the verifier fails the jobs of that policy in one line) and
exits. Nothing hangs.

There is one real-time timer a process: a deadline entered while another timer runs (an enclosing
deadline, a caller's ``signal.alarm``) keeps that timer's time, its handler fires when it is due, and
the timer runs on after the deadline's body with what it had left.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

EXIT_SWALLOWED = 70  # the exit status of a process whose policy code swallowed its deadline's stop


def _exit_swallowed(message: str) -> None:
    sys.stderr.write(f"specsched: {message}\n")
    sys.stderr.flush()
    os._exit(EXIT_SWALLOWED)


_last_resort: Callable[[str], None] = _exit_swallowed


def when_swallowed(report: Callable[[str], None]) -> None:
    """What this process does when policy code swallowed its stop: `report(message)` then exits (a verifier
    tells the engine its jobs failed). The default writes the message to stderr."""
    global _last_resort

    def last_resort(message: str) -> None:
        try:
            report(message)
        finally:
            _exit_swallowed(message)

    _last_resort = last_resort


class Overrun(BaseException):
    """Policy code ran past its deadline. A BaseException, so that a policy's own ``except Exception``
    cannot swallow it."""


def overran(policy: str, method: str, seconds: float) -> str:
    """The error line of a policy stopped by its deadline."""
    return f"policy {policy!r}: {method} did not return within {seconds:g} s (--policy-timeout), so it was stopped"


def policy_call(policy: str, method: str, seconds: float, call: Callable, *args, error: type[Exception],
                passes: tuple[type[BaseException], ...] = ()):
    """`call(*args)`, policy code, under its deadline: what it returns, or one `error` line naming the policy and
    the method. The one guard around policy code (the run queue's pick, served and constructor, what-if's, the
    loader's import). Whatever the code raises - SystemExit too, which would otherwise end the process with
    the policy's own status - becomes that line; Ctrl-C and `passes` go through, and so does the Overrun of
    an enclosing deadline when this one has none (`seconds` <= 0)."""
    try:
        with deadline(seconds):
            return call(*args)
    except (KeyboardInterrupt, *passes):
        raise
    except Overrun:
        if seconds <= 0:
            raise
        raise error(overran(policy, method, seconds)) from None
    except BaseException as exc:
        text = " ".join(str(exc).split())
        where = "" if method == "pick" else f" in {method}"
        raise error(f"policy {policy!r} raised {type(exc).__name__}{where}" + (f": {text}" if text else "")) from exc


@contextmanager
def deadline(seconds: float):
    """Raise Overrun in the body once `seconds` of wall time have passed. A no-op off the main thread (a
    signal handler runs only there), where SIGALRM does not exist, or for seconds <= 0."""
    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    start, armed, outer_due, stopped = time.monotonic(), True, False, False

    def expired(signum, frame):
        nonlocal outer_due, stopped
        if not armed:  # a signal handled after the body ended is not the body's
            return
        elapsed = time.monotonic() - start
        if not outer_due and 0 < outer < seconds and elapsed < seconds:  # the enclosing timer's time came first
            outer_due = True
            signal.setitimer(signal.ITIMER_REAL, seconds - elapsed)
            if callable(previous):
                previous(signum, frame)  # it fires as it would have (an enclosing deadline raises its Overrun)
            return
        if stopped:  # the Overrun raised a grace period ago was swallowed, and the body runs on
            _last_resort(f"policy code ran {elapsed:.0f} s, past its {seconds:g} s deadline (--policy-timeout), "
                         "and swallowed the stop (a bare except: or except BaseException); its jobs failed")
        stopped = True
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1.0))
        raise Overrun

    previous = signal.signal(signal.SIGALRM, expired)
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    if 0 < outer < seconds:
        signal.setitimer(signal.ITIMER_REAL, outer)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)  # None: set outside Python
        if outer > 0 and not (outer_due and callable(previous)):  # the enclosing timer runs on with what it had
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-6), interval)
        elif outer > 0 and interval:  # its handler ran while the body did: its next period
            signal.setitimer(signal.ITIMER_REAL, interval, interval)
