"""Liveness: the engine's side of the heartbeats (heartbeat.py is the children's) - who has been silent
too long.

A draft worker serving a job, or the verifier while a job runs, silent for ``--heartbeat-timeout`` is
killed, so that the next look at the dead finds it and the supervisor restarts it (supervisor.py). A
worker on another host is judged in every state: nothing else would tell a parked one's host had gone.
Liveness is measured, not assumed, as in ZeroMQ's Paranoid Pirate.
"""

from __future__ import annotations

import time

from .jobs import LiveJobs, Phase
from .process_table import ProcessTable, State

STALL_S = 1.0  # a look this late after the last one means the engine's own loop stalled


class Liveness:
    """Owns the time of its last look: a heartbeat is timed when the engine reads it, so after a stall of the
    engine's own loop nobody is judged and every clock starts over."""

    def __init__(self, table: ProcessTable, live: LiveJobs, timeout_s: float) -> None:
        self.table, self.live, self.timeout_s = table, live, timeout_s
        self.last_check = time.monotonic()

    def check(self) -> None:
        now, limit = time.monotonic(), self.timeout_s
        stalled, self.last_check = now - self.last_check > STALL_S, now
        verifier = self.table.verifier
        serving = verifier.state is State.READY and any(j.phase is Phase.RUNNING for j in self.live.jobs)
        self._check_remote(now, stalled)
        for c in [*[w for w in self.table.workers() if w.host is None], verifier]:
            busy = c.state is State.DRAFTING or (c is verifier and serving)
            if stalled:
                c.beat = now
            elif busy and c.hung is None and now - c.beat > limit:
                c.hung = f"sent no heartbeat for {limit:g} s (stopped or hung), so the engine killed it"
                self.table.kill(c)

    def _check_remote(self, now: float, stalled: bool) -> None:
        limit = self.timeout_s
        for c in self.table.workers():
            if c.host is None or c.state is State.RETIRING:
                continue
            if stalled:
                c.beat = now
            elif c.hung is None and now - c.beat > limit:
                c.hung = f"at {c.host} sent no heartbeat for {limit:g} s, so the engine gave up on it"
                self.table.kill(c)
