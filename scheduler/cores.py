"""Cores as a scheduled resource: the verifier's torch threads follow what the draft workers leave free.

On a 2-core machine with three draft workers, cores − workers leaves the verifier one thread. But a
draft worker is not always busy: while its draft waits in the run queue or
is being verified, it sleeps on its socket. So before every forward the verifier counts the workers
that are drafting now (owners of live sequences with no draft queued, none being verified and none
riding aside) and takes the rest:

    threads = max(1, usable cores − drafting workers)

- every core when the drafts are idle (a lockstep batch, the last sequences of a job, target-only
  jobs), one when they all draft. ``--verifier-threads N`` fixes N instead (``Cores.fixed``).
  ``torch.set_num_threads`` is called only when the count changes (OpenMP keeps its pool, so a change
  costs microseconds). Per job the verifier counts forwards and their seconds by thread count: the
  record's ``verifier_threads`` and the summary's row show where the time went.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


class Cores:
    def __init__(self, set_threads: Callable[[int], None] | None = None, total: int | None = None) -> None:
        self.set_threads = set_threads
        self.total = total or usable_cores()
        self.fixed: int | None = None   # --verifier-threads N: this many, whatever the workers do
        self.current = 0
        self.used: dict[int, dict[int, list[float]]] = {}  # job -> threads -> [forwards, seconds]

    def assign(self, threads: int, elastic: bool) -> None:
        """A job's message: elastic (threads follow the drafting workers) or a fixed count."""
        self.fixed = None if elastic else max(1, threads)

    def before_forward(self, drafting: int) -> int:
        """Set (and return) the threads of the forward about to run, with `drafting` workers busy."""
        threads = self.fixed or max(1, self.total - drafting)
        if threads != self.current and self.set_threads is not None:
            self.set_threads(threads)
        self.current = threads
        return threads

    def add(self, jobs, threads: int, seconds: float) -> None:
        for job in jobs:
            entry = self.used.setdefault(job, {}).setdefault(threads, [0, 0.0])
            entry[0] += 1
            entry[1] += seconds

    def report(self, job: int) -> dict[str, list[float]]:
        """{threads: [forwards, seconds]} for the job, with string keys (msgpack and JSON agree on them)."""
        return {str(t): v for t, v in sorted(self.used.pop(job, {}).items())}


def describe(used: dict) -> str | None:
    """The summary's row: forwards and mean forward time at each thread count."""
    if not used:
        return None
    parts = []
    for threads, (forwards, seconds) in sorted(used.items(), key=lambda kv: int(kv[0])):
        parts.append(f"{threads}: {int(forwards)} forwards ({1e3 * seconds / max(forwards, 1):.1f} ms mean)")
    return ", ".join(parts)
