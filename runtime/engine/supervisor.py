"""Supervision: a draft worker that dies while it serves a job is restarted, as an Erlang/OTP supervisor
restarts its child, and takes its sequences back from their verified prefix.

Restart intensity, as OTP's: at most ``--max-restarts`` R restarts of one child within
``--restart-period`` T seconds; the next death in that window and the supervisor gives up - the jobs
the child serves fail, with one line and every verified token kept. The new process takes the dead
one's name and worker id, so the verifier's owner of each sequence stays the same; it is told to
*resume* (scheduler/resume.py): for each unfinished sequence it asks the verifier - the authority on
what is committed - for the verified context and round, and drafts on. Its *epoch* (restarts of that
worker so far) keeps any draft of the dead process out of the run queue. What can resume: a worker of
a seed or sd job, running or waiting to start. A dsbd beam worker's death still fails its job (its
slot's round would have to be rebuilt; left for later).
"""

from __future__ import annotations

import time
from collections import defaultdict

from specsched.runtime.engine.jobs import JobRun, Phase
from specsched.runtime.engine.process_table import Child, State


class Intensity:
    """OTP's restart intensity: at most `limit` restarts of one child within any `period` seconds."""

    def __init__(self, limit: int, period: float) -> None:
        self.limit, self.period = limit, period
        self.times: dict[str, list[float]] = defaultdict(list)

    def allow(self, name: str, now: float) -> bool:
        recent = [t for t in self.times[name] if now - t < self.period]
        self.times[name] = recent
        if len(recent) >= self.limit:
            return False
        recent.append(now)
        return True


class Supervision:
    """A mixin of the Dispatcher: it shares the dispatcher's jobs, table and sockets."""

    def _supervise(self, child: Child, code: int) -> None:
        """A child exited unasked: restart it if every job it serves can resume, else fail them."""
        error = f"{child.name} exited with status {code}: {self.table.why(child)}"
        serves = self._served_by(child)
        if child.role != "draft" or not serves or any(not _resumable(j) for j in serves):
            self._child_failed(child, error)
            return
        c = self.config
        if not self.intensity.allow(child.name, time.monotonic()):
            self._child_failed(child, f"{child.name} died more than {c.max_restarts} times within "
                                      f"{c.restart_period_s:g} s (--max-restarts {c.max_restarts}, --restart-period "
                                      f"{c.restart_period_s:g}); last: {error}")
            return
        self.table.spawn("draft", child.threads, worker=child.worker)
        self.epochs[child.worker] = epoch = self.epochs.get(child.worker, 0) + 1
        for job in serves:
            if job.phase is not Phase.PENDING:   # a pending job's workers are assigned when it starts
                self.resuming[child.worker] = job
            sequences = [s for w, seqs in job.assignments() if w == child.worker for s in seqs]
            job.collected.restarts.append({
                "process": f"draft-{job.local_worker(child.worker)}", "at": time.monotonic(), "why": error,
                "epoch": epoch, "reprefilled_tokens": sum(len(p) + len(job.collected.tokens.get(local, []))
                                                          for _, local, p, _ in sequences
                                                          if local not in job.collected.done)})
            job.mark(child.worker, "restart")

    def _served_by(self, child: Child) -> list[JobRun]:
        return [j for j in self.jobs if child.job == j.id or (j.phase is Phase.PENDING and child.worker in j.workers)]

    def _hand_resumed(self) -> None:
        """A restarted worker, once loaded and once its job runs, is told to resume its sequences."""
        for worker, job in list(self.resuming.items()):
            child = self.table.by_worker(worker)
            if job.phase is Phase.DONE or job not in self.jobs or child.state is State.EXITED:
                del self.resuming[worker]
            elif child.state is State.READY and job.phase is Phase.RUNNING:
                del self.resuming[worker]
                child.become(State.DRAFTING, job.id)
                sequences = [[*s, "resume"] for w, seqs in job.assignments() if w == worker for s in seqs]
                self._send(child, "assign", {"job": job.id, "config": job.config.to_dict(), "sequences": sequences,
                                             "epoch": self.epochs[worker]})


def _resumable(job: JobRun) -> bool:
    return job.phase is Phase.PENDING or job.config.mode in ("seed", "sd")
