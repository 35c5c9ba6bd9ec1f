"""Endings: how a job leaves the engine, always with every token verified so far in its record.

A job completes once the verifier has closed it (``job_done``) and every worker has gone idle
(reports.py); fails when the verifier ends it (``job_failed``) or when a child that served it died and
cannot be restarted (supervisor.py; a verifier or zygote that cannot is the engine's end, and every
job's); is cancelled; or is interrupted when the engine shuts down, its children stopped politely and
then by SIGTERM/SIGKILL, the commits still in flight drained first. Every way ends in ``complete``,
which files the job's process history and hands it to ``finish``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from .jobs import JobRun, LiveJobs, Phase
from .orders import Orders
from .process_table import Child, ProcessTable, State

STOP_GRACE_S = 3.0    # a child told to stop gets this long before SIGTERM


class Endings:
    """Owns ``broken``: why no job can run any more (the verifier or the zygote is gone for good, or the
    engine's loop broke), None while they can. It ends jobs of `live`, hands each to `finish` (which
    builds its record and wakes its waiters) and reads what is still in flight through `salvage`.

    The table and the orders exist once the engine's thread has started its children (``started``);
    jobs that end before that (the thread failed first) end with no process history."""

    def __init__(self, live: LiveJobs, finish: Callable[[JobRun], None],
                 salvage: Callable[[float], None]) -> None:
        self.live, self.finish, self.salvage = live, finish, salvage
        self.broken: str | None = None
        self.table: ProcessTable | None = None
        self.orders: Orders | None = None

    def started(self, table: ProcessTable, orders: Orders) -> None:
        self.table, self.orders = table, orders

    def broken_job(self, job: JobRun, error: str) -> None:
        """A job submitted once the verifier is gone for good: it fails with `error` and never starts."""
        job.status, job.error = "failed", error
        self.finish(job)

    def break_all(self, error: str) -> None:
        """Nothing can run any more: every job fails with `error`, and so does every job submitted later."""
        self.broken = error
        for job in list(self.live.jobs):
            self.end(job, "failed", error)

    def child_failed(self, child: Child, error: str) -> None:
        """A verifier failure ends every job (and the engine); a worker's ends the jobs it serves."""
        if child.role == "verifier":
            self.break_all(error)
            return
        serves = [j for j in self.live.jobs
                  if child.job == j.id or (j.phase is Phase.PENDING and child.worker in j.workers)]
        for job in serves:
            self.end(job, "failed", error)

    def end(self, job: JobRun, status: str, error: str | None, *, forgotten: bool = False) -> None:
        """Finish a job that did not complete: the verifier forgets it, its workers (mid-draft, waiting for
        verdicts that will not come) are stopped, and its record keeps every token committed so far."""
        live = job.phase in (Phase.ANNOUNCED, Phase.RUNNING)
        if live and not forgotten and self.table.verifier.state is State.READY:  # a new one was never told of it
            self.orders.send(self.table.verifier, "cancel", {"job": job.id})
        mine = [c for c in self.table.workers() if c.job == job.id]
        self.table.stop([c for c in mine if c.state is State.DRAFTING], grace=STOP_GRACE_S)
        job.status, job.error = status, error
        self.complete(job)

    def maybe_complete(self, job: JobRun) -> None:
        if job.complete:
            self.complete(job)

    def complete(self, job: JobRun) -> None:
        job.phase, job.collected.finished = Phase.DONE, time.monotonic()
        job.history = {} if self.table is None else \
            {name: [[t, state] for t, state, j in self.table.by_name(pool).history
                    if job.submitted <= t <= job.collected.finished and (j in (None, job.id))]
             for name, pool in job.process_names().items()}
        if self.table is not None:  # the view's final frame: the states at the end, not at its last tick
            job.collected.states = job.table_states(self.table)
        self.live.remove(job)
        self.finish(job)

    def shutdown(self, reason: str | None, status: str) -> None:
        """Stop every child (politely, then SIGTERM/SIGKILL), keep what was still in flight, end every job."""
        if self.table is not None:
            for c in self.table.children.values():
                if c.state is not State.EXITED and c.proc.poll() is None:
                    try:
                        self.orders.send(c, "stop", {})
                    except zmq.ZMQError:
                        pass
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and any(c.proc.poll() is None for c in self.table.children.values()):
                self.salvage(0.02)
            self.table.teardown()
        if self.table is not None and self.table.children:  # none ever started: nothing can be in flight
            self.salvage(0.2)
        for job in list(self.live.jobs):
            job.status, job.error = status, reason
            self.complete(job)
