"""What the children say, and what the engine does about it.

Over the control socket only ``ready`` (so the engine's ROUTER can reach the child from then on);
over telemetry everything else: commits and events (filed under their job, in the job's own ids),
the verifier's job_ack (the job's workers may draft), job_done / job_failed, a worker's ``idle``,
the verifier's ``beam_want`` (a dsbd slot needs a worker) and any child's ``error``. Messages are
matched to the live incarnation of a child by its pid, so a late message of a dead process is never
taken for its successor's, and on ipc to the name its socket was admitted under (runtime/core/security.py),
so a child cannot speak as another. Each kind has one handler (``Reports.handlers``).
"""

from __future__ import annotations

import time

from ..core.beam_state import BeamState
from ..core.config import Mode
from ..core.events import Event
from ..core.security import Keys, speaker, speaks_as
from ..core.wire import REFUSED, Message, ProtocolError, unpack
from .admission import Admission
from .endings import Endings
from .jobs import JobRun, LiveJobs, Phase
from .joining import Joining
from .process_table import Child, ProcessTable, State
from .supervisor import Supervisor

VERIFIER_ONLY = frozenset({"commit", "job_ack", "job_done", "job_failed", "beam_want", "refused"})


class Reports:
    """Hears the children and hands each message to the part it concerns: `supervisor`, `admission`,
    `endings`, `joining`, or the job itself (`live`). Owns ``rejected_telemetry``: messages refused over
    the engine's life (every running job counts its own too)."""

    def __init__(self, keys: Keys | None, table: ProcessTable, live: LiveJobs, *, supervisor: Supervisor,
                 admission: Admission, endings: Endings, joining: Joining) -> None:
        self.keys, self.table, self.live = keys, table, live
        self.supervisor, self.admission, self.endings, self.joining = supervisor, admission, endings, joining
        self.rejected_telemetry = 0
        # a kind not here is a valid message of no concern to the engine: it is read and ignored
        self.handlers = {
            "commit": self._commit, "events": self._events, "job_ack": self._job_ack, "job_done": self._job_done,
            "job_failed": self._job_failed, "idle": self._idle, "beat": self._beat, "beam_want": self._beam_want,
            "error": self._error, "bye": self._bye, "refused": self._refused,
        }

    def hello(self, frames: list) -> None:
        """A child's ``ready``, sent over control: the ROUTER now knows its identity and can reach it. Anyone
        else knocking there is a worker joining from another host, or junk (joining.py)."""
        header, frames = frames[1:], [f.bytes for f in frames]  # the header frame carries User-Id
        name = frames[0] if self.keys is None else self.keys.logical_id(frames[0], lambda logical: logical)
        if not speaks_as(self.keys, header, name):
            self.refuse()  # on ipc a child speaks only under its own name, and its own identity
            return
        try:
            child = self.table.children[name.decode()]
        except (KeyError, UnicodeDecodeError):
            try:
                self.joining.door(frames)
            except REFUSED:
                self.refuse()
            return
        try:  # junk under a child's name is refused and counted, as on the telemetry socket (never a crash)
            msg = unpack(frames[1:])
            placed = {k: str(msg.fields[k]) for k in ("device", "asked") if k in msg.fields}
        except REFUSED:
            self.refuse()
            return
        if msg.kind == "ready" and child.state is State.STARTING:
            child.placed = placed
            child.become(State.READY)

    def telemetry(self, frames: list) -> None:
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
            handler = self.handlers.get(msg.kind)
            if handler is not None:
                handler(msg, sender)
        except REFUSED:
            self.refuse()

    def refuse(self) -> None:
        self.rejected_telemetry += 1
        for job in self.live.running():
            job.collected.rejected_telemetry += 1

    def _sender(self, msg: Message) -> Child | None:
        """The child that sent `msg`; only the verifier speaks of jobs and commits, and every event row a
        child sends is its own."""
        pid = msg.fields.get("pid")
        child = next((c for c in self.table.children.values() if pid is not None and c.proc.known_pid == pid), None)
        if child is None or (msg.kind in VERIFIER_ONLY and child.role != "verifier"):
            return None
        if msg.kind == "events" and any(row[0] != pid for row in msg.fields["rows"]):
            return None
        return child

    # -- the handlers, one per kind ----------------------------------------------------------------------
    def _commit(self, msg: Message, sender: Child) -> None:
        """A beam sequence's commit carries its beams (beam_state.py): read before anything is kept."""
        f = msg.fields
        job, beams = self.live.by_seq.get(int(f["seq"])), BeamState.from_dict(f["beam"]) if "beam" in f else None
        if job is not None:
            job.commit(int(f["seq"]), msg.arrays["tokens"].tolist(), bool(f.get("done")), beams)

    def _events(self, msg: Message, sender: Child) -> None:
        for row in msg.fields["rows"]:
            self._event(Event.from_row(row))

    def _job_ack(self, msg: Message, sender: Child) -> None:
        """A new verifier has a running job again (its workers resync), or the verifier took a new one."""
        job = self.live.find(int(msg.fields["job"]))
        if job is None or self.supervisor.acknowledged(job):
            return
        if job.phase is Phase.ANNOUNCED:
            self.admission.start(job)

    def _job_done(self, msg: Message, sender: Child) -> None:
        job = self.live.find(int(msg.fields["job"]))
        if job is not None:
            _keep_counts(job, msg.fields)
            job.collected.verifier_finished = True
            self.endings.maybe_complete(job)

    def _job_failed(self, msg: Message, sender: Child) -> None:
        """The verifier ended a job (its policy failed, or it could not start): what it had counted is kept."""
        job = self.live.find(int(msg.fields["job"]))
        if job is not None:
            if "counters" in msg.fields:  # a job that never started has none
                _keep_counts(job, msg.fields)
            self.endings.end(job, "failed", str(msg.fields.get("message", "the verifier ended the job")),
                             forgotten=True)

    def _idle(self, msg: Message, sender: Child) -> None:
        """A worker finished its assignment (or, in dsbd, left its beam slot: the sequence ended or narrowed)."""
        job_id = int(msg.fields["job"])
        job = self.live.find(job_id)
        if sender.role != "draft" or sender.state is not State.DRAFTING or sender.job != job_id:
            return
        sender.become(State.PARKED)
        if job is not None:
            job.idle.add(sender.worker)
            if job.config.mode == Mode.DSBD:
                job.mark(sender.worker, "exit")
            self.endings.maybe_complete(job)

    def _beat(self, msg: Message, sender: Child) -> None:
        sender.beat = time.monotonic()  # liveness.py: the child is not stopped

    def _beam_want(self, msg: Message, sender: Child) -> None:
        """dsbd: a sequence widened; admission hands the slot a worker."""
        f = msg.fields
        job = self.live.find(int(f["job"]))
        if job is not None:
            self.live.wants.append((job, int(f["seq"]), int(f["slot"]), int(f["round"])))

    def _error(self, msg: Message, sender: Child) -> None:
        """Its last words: the child exits next, and the supervisor hears why."""
        sender.said = str(msg.fields.get("message", f"{sender.name} failed"))
        self.joining.left(sender, 1)

    def _bye(self, msg: Message, sender: Child) -> None:
        """A remote worker leaves (joining.py); a forked child's exit is seen by the zygote."""
        self.joining.left(sender, int(msg.fields.get("code", 0)))

    def _refused(self, msg: Message, sender: Child) -> None:
        """The verifier's gatekeeper: handshakes refused so far (gatekeeper.py)."""
        self.joining.verifier_refusals(sender.proc.known_pid, int(msg.fields["count"]))

    def _event(self, e: Event) -> None:
        if e.job >= 0:  # the verifier says whose it is (one job's forward, batched or not)
            job = self.live.find(e.job)
            if job is not None and job.phase is not Phase.PENDING:
                job.event(e)
            return
        if e.seq >= 0:
            job = self.live.by_seq.get(e.seq)
            if job is not None:
                job.event(e)
            return
        for job in self.live.running():  # the verifier's shared time (idle, a batch across jobs): every running job
            job.event(e)


def _keep_counts(job: JobRun, f: dict) -> None:
    """What the verifier counted for a job it closed (``job_done``, or ``job_failed`` after it ran)."""
    job.collected.counters = dict(f["counters"])
    job.collected.cost_curve = f.get("cost_curve")
    job.collected.calibration = dict(f.get("calibration") or {})
    job.collected.verifier_threads = dict(f.get("verifier_threads") or {})
    job.collected.beams = dict(f.get("beams") or {})
