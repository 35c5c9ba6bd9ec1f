"""The verifier process's loop around ``Verifier.step()``: jobs in from the engine (control socket),
drafts in from the workers (ROUTER), verdicts out, until the engine says stop or goes away."""

from __future__ import annotations

import time

import zmq

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.beam_messages import TreeDraft
from ..runtime.core.deadline import when_swallowed
from ..runtime.core.events import VERIFIER
from ..runtime.core.gatekeeper import Gatekeeper
from ..runtime.core.messages import Draft
from ..runtime.core.resume import Resume
from ..runtime.core.security import Keys, secure_server, speaker, speaks_as
from ..runtime.core.transport import Telemetry, identity_name
from ..runtime.core.wire import REFUSED, ProtocolError, pack, unpack
from .cores import Cores
from .jobs import Counters, JobState
from .resume import resume
from .run_queue import PolicyFailure
from .verifier import Verifier


def serve(target: LanguageModel, ctx: zmq.Context, endpoint: str, control: zmq.Socket, telemetry: Telemetry,
          parent_alive, set_threads=None, *, keys: Keys | None = None, gate: Gatekeeper | None = None,
          placed: dict | None = None) -> Counters:
    """The verifier process's loop, until the engine says stop (or goes away). On tcp the run queue's
    socket is a CURVE server (`keys`) whose handshakes `gate` judges and counts; `placed` (where the
    target was placed: device, the --device asked for) goes to the engine with ``ready``."""
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 1000)
    router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker takes its dead predecessor's identity over
    secure_server(router, keys)
    if gate is not None:
        gate.watch(router)
        gate.start()
    router.bind(endpoint)
    v = Verifier(target, telemetry, Cores(set_threads))
    # a policy that swallows its deadline's stop: its jobs fail in one line, then this process exits (a new
    # verifier serves whatever comes next), and the engine hears of it before the exit
    when_swallowed(lambda message: _fail_and_flush(v, telemetry, message))
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(control, zmq.POLLIN)
    control.send_multipart(pack("ready", {"role": "verifier", "worker": VERIFIER, **(placed or {})}))  # reachable now
    idle_since = time.monotonic()
    try:
        while parent_alive():
            busy = v.ready_to_pick() or v.has_target_only_work()
            # short polls: a dead engine still ends the loop
            events = dict(poller.poll(0 if busy else 100))
            was_empty = not v.jobs
            if control in events and not _control(v, control, telemetry):
                break
            if was_empty and v.jobs:  # idle between jobs is nobody's idle time: a job's starts when it arrives
                idle_since = time.monotonic()
            if router in events:
                _drain_drafts(v, router, keys)
            replies = v.step(idle_since)
            for r in replies:
                router.send_multipart([_routed(r.reply_to, keys), *r.verdict.to_frames()], copy=False)
            if replies or busy:
                idle_since = time.monotonic()
            v.close_finished_jobs()
    finally:
        router.close()
    return v.counters


def _fail_and_flush(v: Verifier, telemetry: Telemetry, message: str) -> None:
    v.fail_speculative_jobs(f"verifier: PolicyFailure: {message}")
    time.sleep(0.5)  # the failure leaves through zmq's I/O thread, which the exit would stop mid-send


def _control(v: Verifier, control: zmq.Socket, telemetry: Telemetry) -> bool:
    """Jobs in, cancellations, stop. Returns False on stop."""
    while control.poll(0):
        msg = unpack(control.recv_multipart(copy=False))
        if msg.kind == "stop":
            return False
        if msg.kind == "job":
            if msg.fields.get("threads"):
                v.cores.assign(int(msg.fields["threads"]), bool(msg.fields.get("elastic", False)))
            job = JobState.from_message(msg.fields, v.target)
            try:
                v.add_job(job)
            except PolicyFailure as exc:  # its policy cannot start: that job fails, the others go on
                telemetry.send("job_failed", {"job": job.id, "message": f"verifier: PolicyFailure: {exc}"})
                continue
            telemetry.send("job_ack", {"job": job.id})
        elif msg.kind == "cancel":
            job = v.jobs.get(int(msg.fields["job"]))
            if job is not None:
                v.finish_job(job)
        else:
            raise ProtocolError(f"unexpected control message {msg.kind!r}")
    return True


DRAIN_MAX = 1000  # messages read per turn of the loop


def _routed(logical: bytes, keys: Keys | None) -> bytes:
    """The socket identity of the worker whose logical identity is `logical` (b"w1": security.py)."""
    return keys.routing_id(logical.decode(), identity_name(logical).decode()) if keys is not None else logical


def _drain_drafts(v: Verifier, router: zmq.Socket, keys: Keys | None) -> None:
    """What has arrived, into the run queue: each message checked to come from the worker its identity names
    (on ipc: the identity's tag, and the name its handshake was admitted under), then by its kind."""
    for _ in range(DRAIN_MAX):  # a flood still leaves turns to verify
        if not router.poll(0):
            break
        frames = router.recv_multipart(copy=False)
        now = time.monotonic()
        try:
            msg = unpack(frames[1:])
            sender = frames[0].bytes if keys is None else keys.logical_id(frames[0].bytes, identity_name)
            if not speaks_as(keys, frames[1:], None if sender is None else identity_name(sender)):
                raise ProtocolError(f"{msg.kind} as {frames[0].bytes!r} from the socket of {speaker(frames[1:])!r}")
            if msg.kind == "hello":  # a worker checking its connection before it says ready
                router.send_multipart([frames[0], *pack("welcome")])
                continue
            if msg.kind == "beam_draft":
                v.admit_tree(TreeDraft.from_message(msg), sender, now)
                continue
            if msg.kind == "resume":  # a restarted worker: where its sequence stands (scheduler/resume.py)
                answer = resume(v, Resume.from_message(msg), sender)
                if answer is not None:
                    router.send_multipart([frames[0], *answer.to_frames()], copy=False)
                continue
            if msg.kind in ("beam_join", "beam_resume"):  # a worker the engine sent for a vacant beam slot, or a
                # restarted one asking where its slot stands (beam_rounds.py): the slot's task at once
                take = v.join_beam if msg.kind == "beam_join" else v.resume_beam
                r = take(msg.fields, sender)
                if r is not None:  # None: a probe with nothing to say (beam_steps.py)
                    router.send_multipart([_routed(r.reply_to, keys), *r.verdict.to_frames()], copy=False)
                continue
            if msg.kind != "draft":
                raise ProtocolError(f"unexpected {msg.kind!r} message")
            v.admit(Draft.from_message(msg), sender, now)
        except REFUSED as exc:
            v.reject(exc)  # whatever a hostile message's contents raise: counted, never fatal
