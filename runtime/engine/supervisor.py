"""Supervision: a draft worker that dies while it serves a job is restarted, as an Erlang/OTP supervisor
restarts its child, and takes its work back from the verifier, the authority on it.

Restart intensity, as OTP's: at most ``--max-restarts`` R restarts of one child within
``--restart-period`` T seconds; the next death in that window and the supervisor gives up - the jobs the
child serves fail, with one line and every verified token kept. The new process takes the dead one's
name and worker id, so the verifier's owner of each sequence (and beam slot) stays the same; it is told
to *resume* what the dead one was last assigned. A seed or sd worker, for each unfinished sequence, asks
the verifier for the verified context and round and drafts on (scheduler/resume.py); a dsbd beam worker
asks where its slot stands - the verifier holds the slot's beam - and drafts the round the slot waits
for (scheduler/beam_rounds.py). Its *epoch* (restarts of that worker so far) keeps any draft or tree of
the dead process out. A worker of a job waiting to start simply starts with it; a dsbd pool worker that
holds no slot (parked, or loaded and not yet handed one) is replaced in the pool. A stopped worker is
found by its silence (liveness.py) and killed, then restarted the same way.

The verifier too: a new one is started, every live job is announced to it again with each sequence's
committed tokens (all the engine has heard, the dead verifier's last messages drained first), which
its first forward re-reads into a fresh target cache; each drafting worker is then told to *resync* -
drop its conversation with the dead verifier and resume under a new epoch - and a parked one whose
sequence the engine does not yet hold as done resumes it (commits and verdicts travel on two sockets,
with no order between them). A beam sequence is announced with its beams as well, as the dead verifier
reported them with its last round's commit (runtime/core/beam_state.py); the new verifier goes on from
that round, and a dsbd worker resumes the slot it holds there.

The zygote that forks every child (zygote.py) as well: when it dies, every child dies with it; a new
zygote is started first (under the same restart intensity, by the name "zygote"), then each child is
restarted as above, its record entry saying it died with the zygote.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from ..core.config import Mode, RunConfig
from .admission import verifier_threads
from .endings import Endings
from .jobs import JobRun, LiveJobs, Phase
from .orders import Orders
from .process_table import Child, ProcessTable, State


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


class Supervisor:
    """Restarts what died and hands the restarted their work back.

    Owns the restart ``intensity``, each worker's ``epochs`` (restarts so far; the verifier's under -1),
    ``resuming`` (a restarted worker -> the job whose sequences it resumes once loaded), ``reannounce``
    (jobs a new verifier must be told of again) and ``resyncing`` (jobs whose workers resync once it has
    them). It restarts children of `table`, tells them their work through `orders`, fails what cannot
    resume through `endings`, and reads the dead verifier's last commits through `salvage`."""

    def __init__(self, config: RunConfig, table: ProcessTable, live: LiveJobs, orders: Orders, endings: Endings,
                 salvage: Callable[[float], None]) -> None:
        self.config, self.table, self.live, self.orders, self.endings = config, table, live, orders, endings
        self.salvage = salvage
        self.intensity = Intensity(config.supervision.max_restarts, config.supervision.restart_period_s)
        self.epochs: dict[int, int] = {}
        self.resuming: dict[int, JobRun] = {}
        self.reannounce: dict[int, JobRun] = {}
        self.resyncing: set[int] = set()

    # -- what admission and reports ask ---------------------------------------------------------------
    def epoch(self, worker: int) -> int:
        return self.epochs.get(worker, 0)

    def resumes(self, worker: int) -> bool:
        """Restarted, and not yet told to resume: its work is not to be given to it twice."""
        return worker in self.resuming

    def reannouncing(self, job: JobRun) -> bool:
        """A new verifier does not have the job yet: its workers wait for it."""
        return job.id in self.reannounce or job.id in self.resyncing

    def acknowledged(self, job: JobRun) -> bool:
        """The verifier acknowledged `job`: if it is a new verifier getting a running job again, the job's
        workers resync (True); a first acknowledgement is admission's (False)."""
        if job.id not in self.resyncing:
            return False
        self._resync(job)
        return True

    # -- the dead ---------------------------------------------------------------------------------------
    def reap(self) -> None:
        """Every child found dead since the last look: the zygote first, which the others' restarts need."""
        dead = self.table.dead()
        if self.table.zygote.died and not self.endings.broken:  # broken: it died once too often, and was told so
            self._supervise_zygote()
        for child, code in dead:
            if self.endings.broken:  # the zygote could not be restarted: every job has failed already
                break
            self._supervise(child, code)

    def _supervise_zygote(self) -> None:
        """The zygote died, and every child it forked with it (PR_SET_PDEATHSIG): a new zygote first, so the
        children's restarts have something to fork them; its death goes in each live job's record as its own.
        Beyond the restart intensity nothing can be started any more: every job fails, in one line."""
        error = self.table.zygote_death()
        if not self.intensity.allow("zygote", time.monotonic()):
            self.endings.break_all(self._beyond("the zygote", error))
            return
        self.table.new_zygote()
        for job in self.live.jobs:
            job.collected.restarts.append({"process": "zygote", "at": time.monotonic(), "why": error,
                                           "epoch": self.table.zygotes - 1, "reprefilled_tokens": 0})

    def _supervise(self, child: Child, code: int) -> None:
        """A child exited unasked: restart it if what it serves can resume, else fail that."""
        error = f"{child.name} {child.hung}" if child.hung else child.said or (
            f"{child.name} died with the zygote" if child.proc.with_zygote else
            f"{child.name} exited with status {code}: {self.table.why(child)}")
        if child.role == "verifier":
            self._restart_verifier(child, error)
            return
        serves = self._served_by(child)
        if not serves:
            self.endings.child_failed(child, error)
            return
        if not self.intensity.allow(child.name, time.monotonic()):
            self.endings.child_failed(child, self._beyond(child.name, error))
            return
        self.table.spawn("draft", child.threads, worker=child.worker).job = child.job  # its death is the job's too
        self.epochs[child.worker] = self.epochs.get(child.worker, 0) + 1
        was_resuming = self.resuming.get(child.worker)
        for job in serves:  # a pending job assigns it at its start, a pool the slot it is handed
            resumes = job.phase is not Phase.PENDING and (child.state_before_exit == "drafting" or job is was_resuming)
            if resumes:
                self.resuming[child.worker] = job
            held = self.orders.entries(job, child.worker) if resumes or job.phase is Phase.PENDING else []
            self._note_restart(job, child.worker, error, [e[1] for e in held])

    def _restart_verifier(self, child: Child, error: str) -> None:
        """A new verifier; every live job is announced to it again with what it has committed, and each of
        its drafting workers is told to resync (resume from the verified prefix) once it has the job."""
        if not self.intensity.allow(child.name, time.monotonic()):
            self.endings.child_failed(child, self._beyond(child.name, error))
            return
        self.salvage(0.05)  # the dead verifier's last commits (and beams): the new one must start from them
        live = [j for j in self.live.jobs if j.phase in (Phase.ANNOUNCED, Phase.RUNNING)]
        self.table.spawn("verifier", child.threads)
        self.epochs[-1] = self.epochs.get(-1, 0) + 1
        for job in self.live.jobs:  # a pending job waited on it too: its record says so
            if job in live:
                self.reannounce[job.id] = job
            self._note_restart(job, -1, error, list(range(job.n)) if job in live else [])

    def _beyond(self, name: str, error: str) -> str:
        c = self.config
        s = c.supervision
        return (f"{name} died more than {s.max_restarts} times within {s.restart_period_s:g} s "
                f"(--max-restarts {s.max_restarts}, --restart-period {s.restart_period_s:g}); last: {error}")

    def _note_restart(self, job: JobRun, worker: int, error: str, sequences: list[int]) -> None:
        """In the job's record: who (in the job's names), when, why, and the tokens its sequences re-read (a new
        verifier reads every beam of a beam sequence)."""
        unfinished = [i for i in sequences if i not in job.collected.done]
        reread = job.reread if worker < 0 else lambda i: len(job.prompts[i]) + len(job.collected.tokens.get(i, []))
        job.collected.restarts.append({
            "process": "verifier" if worker < 0 else f"draft-{job.local_worker(worker)}", "at": time.monotonic(),
            "why": error, "epoch": self.epochs[worker],
            "reprefilled_tokens": sum(map(reread, unfinished))})
        job.mark(worker, "restart")

    def _served_by(self, child: Child) -> list[JobRun]:
        """The jobs a dead child served: the one it drafted for, one waiting to start with it, the one it
        was restarted to resume, and a running dsbd job whose pool it waited in (parked, or loaded)."""
        waiting = self.resuming.get(child.worker) if child.role == "draft" else None
        pooled = child.state_before_exit in ("parked", "ready")
        return [j for j in self.live.jobs if child.job == j.id or j is waiting or (child.worker in j.workers and (
            j.phase is Phase.PENDING or (j.config.mode == Mode.DSBD and pooled)))]

    # -- the restarted, back to work --------------------------------------------------------------------
    def hand_resumed(self) -> None:
        """Once the new verifier is up, it gets every live job again; a restarted worker, once loaded and once
        the verifier knows its job, is told to resume its sequences."""
        verifier = self.table.verifier
        if self.reannounce and verifier.state is State.READY:
            for job in self.reannounce.values():
                if job in self.live:
                    job.collected.processes["verifier"] = verifier.proc.pid  # the live view's
                    job.collected.devices["verifier"] = verifier.placed
                    threads = verifier_threads(self.config, self.live.jobs, job)
                    self.orders.send(verifier, "job", job.job_message(threads, elastic=self.config.elastic_threads))
                    if job.phase is Phase.RUNNING:
                        self.resyncing.add(job.id)   # its workers resync on the job_ack (reports.py)
            self.reannounce.clear()
        for worker, job in list(self.resuming.items()):
            child = self.table.by_worker(worker)
            if job.phase is Phase.DONE or job not in self.live or child.state is State.EXITED:
                del self.resuming[worker]
            elif child.state is State.READY and job.phase is Phase.RUNNING and not self.reannouncing(job):
                del self.resuming[worker]
                self._assign_resume(job, child)

    def _assign_resume(self, job: JobRun, child: Child) -> None:
        child.become(State.DRAFTING, job.id)
        job.idle.discard(child.worker)
        name = f"draft-{job.local_worker(child.worker)}"
        job.collected.processes[name] = child.proc.pid  # the live view's
        job.collected.devices[name] = child.placed
        job.collected.hosts.pop(name, None)             # a worker from another host is replaced by a local one
        self.orders.assign(child, job, [[*s[:4], "resume", *s[5:]] for s in self.orders.entries(job, child.worker)],
                           self.epochs[child.worker])

    def _resync(self, job: JobRun) -> None:
        """The new verifier has the job: each of its drafting workers drops the conversation it had with the
        dead one and resumes from the verified prefix, under a new epoch."""
        self.resyncing.discard(job.id)
        for c in map(self.table.by_worker, job.workers):
            if c.worker in self.resuming or c.state not in (State.DRAFTING, State.PARKED):
                continue
            self.epochs[c.worker] = self.epochs.get(c.worker, 0) + 1
            if c.state is State.DRAFTING:
                self.orders.send(c, "resync", {"job": job.id, "epoch": self.epochs[c.worker]})
            elif self._still_serves(job, c.worker):
                if job.config.mode == Mode.DSBD:
                    job.mark(c.worker, "fork")
                self._assign_resume(job, c)
        self._want_again(job)

    def _still_serves(self, job: JobRun, worker: int) -> bool:
        """A parked worker has work on the new verifier: it heard its last verdict, the engine not yet the commit
        (two sockets, no order between them), so the new verifier does not hold the sequence as done. In dsbd,
        when the beams the engine last heard of give it its slot, or wait for the join it was sent to make: it
        was told to leave in a round whose report the dead verifier never got out."""
        for _, local, _, slot, *how in self.orders.entries(job, worker):
            state = job.beam_states.get(local)
            if local in job.collected.done:
                continue
            if state is None or (slot < len(state.slots) and (
                    state.slots[slot] == worker or (len(how) > 1 and state.wanted[slot] == how[1] >= 0))):
                return True
        return False

    def _want_again(self, job: JobRun) -> None:
        """The new verifier holds a vacant slot as waiting for a worker when the beams it was given say so; a
        request (``beam_want``) the dead one made and the engine never heard is made again."""
        pending = {(seq, slot, want) for j, seq, slot, want in self.live.wants if j is job}
        handed = {(e[0], e[3], e[5]) for w in job.workers for e in self.orders.entries(job, w) if len(e) > 5}
        for local, state in job.beam_states.items():
            for slot, want in enumerate(state.wanted.tolist()):
                key = (job.first_seq + local, slot, want)
                if want >= 0 and not state.done and key not in pending | handed:
                    self.live.wants.append((job, *key))
