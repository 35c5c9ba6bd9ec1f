"""What the children say, and what the engine does about it.

Over the control socket only ``ready`` (so the engine's ROUTER can reach the child from then on);
over telemetry everything else: commits and events (filed under their job, in the job's own ids),
the verifier's job_ack (the job's workers may draft), job_done / job_failed, a worker's ``idle``,
the verifier's ``beam_want`` (a dsbd slot needs a worker) and any child's ``error``. Messages are
matched to the live incarnation of a child by its pid, so a late message of a dead process is never
taken for its successor's, and on ipc to the name its socket was admitted under (runtime/core/security.py),
so a child cannot speak as another. A mixin of the Dispatcher.
"""

from __future__ import annotations

import time

from ..core.beam_state import BeamState
from ..core.config import Mode
from ..core.events import Event
from ..core.security import speaker, speaks_as
from ..core.wire import REFUSED, ProtocolError, unpack
from .jobs import Phase
from .process_table import Child, State

VERIFIER_ONLY = frozenset({"commit", "job_ack", "job_done", "job_failed", "beam_want", "refused"})


class Reports:
    def _hello(self, frames: list) -> None:
        """A child's ``ready``, sent over control: the ROUTER now knows its identity and can reach it. Anyone
        else knocking there is a worker joining from another host, or junk (joining.py)."""
        header, frames = frames[1:], [f.bytes for f in frames]  # the header frame carries User-Id
        name = frames[0] if self.keys is None else self.keys.logical_id(frames[0], lambda logical: logical)
        if not speaks_as(self.keys, header, name):
            self._refuse_telemetry()  # on ipc a child speaks only under its own name, and its own identity
            return
        try:
            child = self.table.children[name.decode()]
        except (KeyError, UnicodeDecodeError):
            self._door(frames)
            return
        try:  # junk under a child's name is refused and counted, as on the telemetry socket (never a crash)
            msg = unpack(frames[1:])
            placed = {k: str(msg.fields[k]) for k in ("device", "asked") if k in msg.fields}
        except REFUSED:
            self._refuse_telemetry()
            return
        if msg.kind == "ready" and child.state is State.STARTING:
            child.placed = placed
            child.become(State.READY)

    def _telemetry(self, frames: list) -> None:
        """One message of a child's. Anything malformed, not from a live child of this engine (by the pid
        every message carries: a late message of a dead process whose name was reused is not its
        successor's), or from the wrong kind of child is refused and counted (``rejected_telemetry``,
        in every running job too), never acted on."""
        try:
            msg = unpack(frames)
            sender = self._sender(msg)
            if sender is None:
                raise ProtocolError(f"{msg.kind} from no child of this engine")
            if not speaks_as(self.keys, frames, sender.name.encode()):
                raise ProtocolError(f"{msg.kind} with {sender.name}'s pid from the socket of {speaker(frames)!r}")
            self._handle(msg, sender)
        except REFUSED:
            self._refuse_telemetry()

    def _refuse_telemetry(self) -> None:
        self.rejected_telemetry += 1
        for job in self.jobs:
            if job.phase is Phase.RUNNING:
                job.collected.rejected_telemetry += 1

    def _sender(self, msg) -> Child | None:
        """The child that sent `msg`; only the verifier speaks of jobs and commits, and every event row a
        child sends is its own."""
        pid = msg.fields.get("pid")
        child = next((c for c in self.table.children.values() if pid is not None and c.proc.known_pid == pid), None)
        if child is None or (msg.kind in VERIFIER_ONLY and child.role != "verifier"):
            return None
        if msg.kind == "events" and any(row[0] != pid for row in msg.fields["rows"]):
            return None
        return child

    def _handle(self, msg, sender: Child) -> None:
        f = msg.fields
        if msg.kind == "commit":  # a beam sequence's carries its beams (beam_state.py): read before anything is kept
            job, beams = self.by_seq.get(int(f["seq"])), BeamState.from_dict(f["beam"]) if "beam" in f else None
            if job is not None:
                job.commit(int(f["seq"]), msg.arrays["tokens"].tolist(), bool(f.get("done")), beams)
        elif msg.kind == "events":
            for row in f["rows"]:
                self._event(Event.from_row(row))
        elif msg.kind == "job_ack":
            job = self._job(int(f["job"]))
            if job is not None and job.id in self.resyncing:  # a restarted verifier has the job again
                self._resync(job)
            elif job is not None and job.phase is Phase.ANNOUNCED:
                job.phase = Phase.RUNNING
                for worker, sequences in job.assignments():
                    if worker in self.resuming:  # restarted before the job started: resumes once loaded
                        continue
                    if job.config.mode == Mode.DSBD:
                        job.mark(worker, "fork")
                    self._assign(self.table.by_worker(worker), job, sequences)
        elif msg.kind == "job_done":
            job = self._job(int(f["job"]))
            if job is not None:
                job.collected.counters = dict(f["counters"])
                job.collected.cost_curve = f.get("cost_curve")
                job.collected.calibration = dict(f.get("calibration") or {})
                job.collected.verifier_threads = dict(f.get("verifier_threads") or {})
                job.collected.beams = dict(f.get("beams") or {})
                job.collected.verifier_finished = True
                self._maybe_complete(job)
        elif msg.kind == "job_failed":
            job = self._job(int(f["job"]))
            if job is not None:
                self._end(job, "failed", str(f.get("message", "the verifier ended the job")), forgotten=True)
        elif msg.kind == "idle":
            child, job = sender, self._job(int(f["job"]))
            if child.role != "draft" or child.state is not State.DRAFTING or child.job != int(f["job"]):
                return
            child.become(State.PARKED)
            if job is not None:
                job.idle.add(child.worker)
                if job.config.mode == Mode.DSBD:  # it left its beam slot: the sequence ended or narrowed
                    job.mark(child.worker, "exit")
                self._maybe_complete(job)
        elif msg.kind == "beat":  # heartbeat.py: the child is not stopped
            sender.beat = time.monotonic()
        elif msg.kind == "beam_want":  # dsbd: a sequence widened; admission.py hands the slot a worker
            job = self._job(int(f["job"]))
            if job is not None:
                self.wants.append((job, int(f["seq"]), int(f["slot"]), int(f["round"])))
        elif msg.kind == "error":  # its last words: the child exits next, and the supervisor hears why
            sender.said = str(f.get("message", f"{sender.name} failed"))
            self._remote_left(sender, 1)
        elif msg.kind == "bye":  # a remote worker leaves (joining.py); a forked child's exit is seen by the zygote
            self._remote_left(sender, int(f.get("code", 0)))
        elif msg.kind == "refused":  # the verifier's gatekeeper: handshakes refused so far (gatekeeper.py)
            self.verifier_refused[sender.proc.known_pid] = int(f["count"])

    def _event(self, e: Event) -> None:
        if e.job >= 0:  # the verifier says whose it is (one job's forward, batched or not)
            job = self._job(e.job)
            if job is not None and job.phase is not Phase.PENDING:
                job.event(e)
            return
        if e.seq >= 0:
            job = self.by_seq.get(e.seq)
            if job is not None:
                job.event(e)
            return
        for job in self.jobs:  # the verifier's shared time (idle, a batch across jobs): every running job
            if job.phase is Phase.RUNNING:
                job.event(e)
