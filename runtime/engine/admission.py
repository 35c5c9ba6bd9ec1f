"""Admission: when a submitted job may start, with which workers, and which idle workers retire.

A job is admitted once its workers are loaded (parked ones first, new ones for the rest, within
``max_workers``) and its scheduling agrees with the speculative jobs already running
(scheduler/run_queue.scheduling_key). It is then announced to the verifier; its workers are told to draft
only after the verifier acknowledges it (reports.py), so no draft ever arrives for a sequence the
verifier does not know. A dsbd job's workers are a pre-forked pool that follows the beam width: a worker
whose slot the width leaves is parked, and when a sequence widens the verifier asks for a worker per new
slot (``beam_want``), which gets a parked one of the job's; the job holds one per beam of every
sequence, so one is always free, at worst once a leaving worker has said so.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ...scheduler.run_queue import scheduling_key
from ..core.config import Mode, RunConfig
from .jobs import JobRun, LiveJobs, Phase
from .orders import Orders
from .process_table import Child, ProcessTable, State

if TYPE_CHECKING:  # supervisor.py imports verifier_threads from here: importing it back would be a cycle
    from .supervisor import Supervisor


def verifier_threads(config: RunConfig, jobs: list[JobRun], job: JobRun) -> int:
    """The verifier's threads while `job` runs: --verifier-threads, every core on llamacpp, or the cores
    the draft workers of every running job (this one's included) leave free."""
    if not config.elastic_threads:  # a fixed count, or every core (config.elastic_threads)
        return config.verifier_threads or os.cpu_count() or 1
    busy = sum(len(j.workers) for j in jobs if j.phase is not Phase.PENDING and j is not job)
    return max(1, (os.cpu_count() or 1) - busy - len(job.workers))


class Admission:
    """Owns nothing of its own but the pool's limits (`max_workers`, `idle_timeout_s`): it reads and moves
    the jobs of `live` and the children of `table`, tells them through `orders`, and asks `supervisor`
    which workers and jobs are still being restarted (their work is the supervisor's to hand back)."""

    def __init__(self, config: RunConfig, table: ProcessTable, live: LiveJobs, orders: Orders,
                 supervisor: Supervisor, *, max_workers: int, idle_timeout_s: float) -> None:
        self.config, self.table, self.live, self.orders, self.supervisor = config, table, live, orders, supervisor
        self.max_workers, self.idle_timeout_s = max_workers, idle_timeout_s

    def _reserved(self) -> set[int]:
        """Workers a live job holds, idle or not: never given to another job, never retired."""
        return {w for j in self.live.jobs for w in j.workers}

    def prestart(self, n: int) -> None:
        """Have at least `n` draft workers (within max_workers), so jobs do not wait for models to load."""
        for _ in range(min(n, self.max_workers) - len(self.table.workers())):
            self.table.spawn("draft", 1)

    def admit(self) -> None:
        verifier_ready = self.table.verifier.state is State.READY
        for job in [j for j in self.live.jobs if j.phase is Phase.PENDING]:
            if job.speculative and not self._key_fits(job):
                continue
            if not self._reserve_workers(job):  # workers load while the verifier loads the target
                continue
            workers = [self.table.by_worker(w) for w in job.workers]
            if not verifier_ready or any(c.state is State.STARTING for c in workers):
                continue  # models still loading: admitted on a later tick
            self._announce(job, workers)

    def _key_fits(self, job: JobRun) -> bool:
        """Its scheduling agrees with every speculative job running, and with every one submitted before
        it: a job under another policy never overtakes an earlier one (whichever's workers load first)."""
        key = scheduling_key(job.config)
        earlier = self.live.jobs[:self.live.jobs.index(job)]
        ahead = [j for j in self.live.jobs if j.speculative and (j.phase is not Phase.PENDING or j in earlier)]
        return all(scheduling_key(j.config) == key for j in ahead)

    def _reserve_workers(self, job: JobRun) -> bool:
        """Give the job its workers: parked ones first, new ones for the rest (within max_workers)."""
        if job.workers or not job.workers_needed:
            return True
        reserved = self._reserved()
        free = [c for c in self.table.workers() if c.idle and c.worker not in reserved]
        short = job.workers_needed - len(free)
        if short > 0 and len(self.table.workers()) + short > self.max_workers:
            return False  # waits for workers to come free
        chosen = sorted(free, key=lambda c: (c.host is None, c.worker))[:job.workers_needed]  # remote ones first
        for _ in range(max(short, 0)):
            chosen.append(self.table.spawn("draft", 1))
            job.spawned += 1
        job.workers = [c.worker for c in chosen]
        return True

    def _announce(self, job: JobRun, workers: list[Child]) -> None:
        threads = verifier_threads(self.config, self.live.jobs, job)
        job.admitted, job.phase = time.monotonic(), Phase.ANNOUNCED
        for c in workers:
            c.become(State.DRAFTING, job.id)
        verifier = self.table.verifier
        job.collected.processes = {"verifier": verifier.proc.pid,
                                   **{f"draft-{i}": c.proc.pid for i, c in enumerate(workers)}}
        job.collected.threads = {"verifier": threads, **{f"draft-{i}": c.threads for i, c in enumerate(workers)}}
        job.collected.devices = {"verifier": verifier.placed, **{f"draft-{i}": c.placed for i, c in enumerate(workers)}}
        job.collected.hosts = {f"draft-{i}": c.host for i, c in enumerate(workers) if c.host is not None}
        self.live.announce(job)
        self.orders.send(verifier, "job", job.job_message(threads, elastic=self.config.elastic_threads))

    def retire_idle(self) -> None:
        if any(j.phase is Phase.PENDING for j in self.live.jobs):
            return  # a waiting job may want them
        now, reserved = time.monotonic(), self._reserved()
        stale = [c for c in self.table.workers()
                 if c.state is State.PARKED and c.worker not in reserved and now - c.since > self.idle_timeout_s
                 and c.host is None]  # a worker on another host stays until it leaves or the engine closes
        for c in stale:
            self.orders.send(c, "stop", {})
            c.become(State.RETIRING)

    def hand_beam_workers(self) -> None:
        """dsbd: each slot the verifier asked a worker for gets a parked worker of its job, which joins it
        (naming the request by the round it was made in); a want with none parked yet waits for the next tick."""
        waiting = []
        for job, seq, slot, want in self.live.wants:
            if job.phase is not Phase.RUNNING or seq not in self.live.by_seq:
                continue  # the job ended meanwhile
            if self.supervisor.reannouncing(job):  # a new verifier without the job yet could not take the join
                waiting.append((job, seq, slot, want))
                continue
            # parked, or a new process that took a dead parked one's place - not one restarted to resume a slot
            child = next((c for c in map(self.table.by_worker, job.workers)
                          if c.state in (State.PARKED, State.READY) and not self.supervisor.resumes(c.worker)), None)
            if child is None:
                waiting.append((job, seq, slot, want))
                continue
            local = seq - job.first_seq
            child.become(State.DRAFTING, job.id)
            job.idle.discard(child.worker)
            job.mark(child.worker, "fork")
            self.orders.assign(child, job, [[seq, local, job.prompts[local], slot, "join", want]],
                               self.supervisor.epoch(child.worker))
        self.live.wants = waiting

    def start(self, job: JobRun) -> None:
        """The verifier acknowledged the announced job: it runs, and its workers may draft (a worker restarted
        before the job started resumes once loaded: supervisor.py)."""
        job.phase = Phase.RUNNING
        for worker, sequences in job.assignments():
            if self.supervisor.resumes(worker):
                continue
            if job.config.mode == Mode.DSBD:
                job.mark(worker, "fork")
            self.orders.assign(self.table.by_worker(worker), job, sequences)
