"""Hostile local peers on ipc: a process of the same user that the engine did not start. Every socket of a
run (the verifier's run queue, the engine's telemetry and control sockets, and each branch lane's) admits
only holders of a password of the run (each child its own), handed to the children through the zygote's pipe
(runtime/core/security.py). So a stranger - no credentials, the wrong password, or CURVE - cannot take a
worker's or the verifier's identity over (ROUTER_HANDOVER), cannot forge telemetry under a child's pid, and
cannot hang the run: every handshake is refused and counted, nothing it sends arrives, and the text is the
undisturbed run's. A compromised child holds only its own name's password: what it sends under another
child's pid or identity is refused and counted, never believed."""

from __future__ import annotations

import zmq
from helpers import outputs, sim_config, wait_until_started, words

from specsched.runtime.core.security import Keys, secure_client
from specsched.runtime.core.wire import pack
from specsched.runtime.engine.engine import Engine

VOCAB = 16
PROMPTS = [words(VOCAB, (i + 1, i + 3)) for i in range(2)]


def strangers(ctx: zmq.Context, endpoints: dict, verifier_pid: int) -> list[zmq.Socket]:
    """At each socket: no credentials, a wrong password, a CURVE client; each sends what a forger would."""
    socks = []
    for name in ("verify", "telemetry", "control"):
        for creds in (None, Keys.for_ipc(), Keys.generate().for_worker()):
            s = ctx.socket(zmq.PUSH if name == "telemetry" else zmq.DEALER)
            if name != "telemetry":  # the names the run's processes speak under
                s.setsockopt(zmq.IDENTITY, b"w0" if name == "verify" else b"verifier")
            secure_client(s, creds)
            s.connect(endpoints[name])
            forged = {"verify": pack("hello", {"worker": 0}),
                      "telemetry": pack("commit", {"pid": verifier_pid, "job": 0, "seq": 0, "tokens": [1, 2, 3]}),
                      "control": pack("job_failed", {"job": 0, "error": "forged"})}[name]
            try:
                s.send_multipart(forged, zmq.NOBLOCK)
            except zmq.Again:  # its handshake was refused already and the connection dropped: nothing leaves
                pass
            socks.append(s)
    return socks


def running(e: Engine) -> tuple:
    """The undisturbed run's record, then the same job started again: (record, job, the verifier's pid)."""
    settings = dict(max_new_tokens=300)
    undisturbed = e.generate(PROMPTS, **settings)
    job = e.submit(PROMPTS, **settings)
    wait_until_started(job)
    return undisturbed, job, next(p["pid"] for p in e.processes if p["name"] == "verifier")


def test_a_stranger_on_every_ipc_socket_gets_nothing_through_and_is_counted():
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        undisturbed, job, verifier = running(e)
        ctx = zmq.Context()
        socks = strangers(ctx, e.endpoints, verifier)
        record = job.result(timeout=120)  # no identity was taken over: the run is not left waiting
        refused = e.refused_handshakes
        for s in socks:
            s.close(linger=0)
        ctx.term()
    assert record.status == "ok", record.error
    assert outputs(record) == outputs(undisturbed)  # no forged commit added a token
    data = record.to_json()
    assert data["counters"]["rejected_messages"] == 0 and data["rejected_telemetry"] == 0  # nothing arrived
    assert refused >= 6 and data["refused_handshakes"] >= 1  # each stranger at the engine's two sockets, at least


def test_a_compromised_child_cannot_speak_as_another():
    """draft-0's credentials (derived from the run's secret as the engine derives them for draft-0): a commit
    under the verifier's pid, the verifier's `ready` and worker 1's hello are all refused and counted, and
    neither identity is taken over (the run would wait on worker 1 or the verifier)."""
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        undisturbed, job, verifier = running(e)
        as_draft0 = e.credentials("draft-0")
        ctx = zmq.Context()
        socks = []
        for name, kind in (("telemetry", zmq.PUSH), ("control", zmq.DEALER), ("verify", zmq.DEALER)):
            s = ctx.socket(kind)
            s.setsockopt(zmq.LINGER, 5000)
            if name != "telemetry":  # the best it can claim: another's name with its own tag (security.py)
                s.setsockopt(zmq.IDENTITY, as_draft0.routing_id("verifier" if name == "control" else "w1", "draft-0"))
            secure_client(s, as_draft0)
            s.connect(e.endpoints[name])
            socks.append(s)
        socks[0].send_multipart(pack("commit", {"pid": verifier, "job": job.id, "seq": job.sequence_ids[0],
                                                "tokens": [1, 2, 3]}))
        socks[1].send_multipart(pack("ready", {"role": "verifier", "worker": -1}))
        socks[2].send_multipart(pack("hello", {"worker": 1}))
        for s in socks:
            s.close()
        ctx.term()
        record = job.result(timeout=120)
    assert record.status == "ok", record.error
    assert outputs(record) == outputs(undisturbed)  # the forged commit added no token
    assert record.to_json()["rejected_telemetry"] == 2
    assert record.metrics.rejected_messages == 1
