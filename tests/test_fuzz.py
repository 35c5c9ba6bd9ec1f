"""The wire under attack from inside: ten thousand junk messages at each socket - malformed, truncated,
oversized, another version, the wrong round or epoch, forged identities and pids - at the verifier's socket
and at the engine's telemetry and control sockets during a live run, sent with the run's own credentials (as
a compromised child would hold them; a process without them gets nothing through: test_hostile_peers.py).
None crashes anything, every one is refused and counted, and the run's output is the undisturbed run's."""

from __future__ import annotations

import random
import time

import pytest
import zmq
from fuzz_frames import CONTROL_KINDS, TELEMETRY_KINDS, VERIFIER_KINDS, junk
from helpers import sim_config, wait_until_started, words

from specsched.runtime.core.security import secure_client
from specsched.runtime.engine.engine import Engine

VOCAB = 16
PROMPTS = [words(VOCAB, (i + 1, i + 3)) for i in range(4)]
AT_VERIFIER, AT_ENGINE, AT_CONTROL = 10_000, 10_000, 10_000


def insider(ctx: zmq.Context, kind: int, e: Engine, identity: bytes | None = None, user: str = "engine") -> zmq.Socket:
    """A socket holding the credentials of `user` in this run (derived from the engine's own, read from its
    dispatcher): a compromised child speaks only under its own name."""
    sock = ctx.socket(kind)
    keys = e.credentials(user)
    if identity is not None:  # as its own process would claim it (tagged: security.py)
        sock.setsockopt(zmq.IDENTITY, keys.routing_id(identity.decode(), user))
    sock.setsockopt(zmq.LINGER, 5000)
    secure_client(sock, keys)
    return sock


@pytest.mark.slow  # ~40 s of CPU, in the slow set (CI); each kind of refusal alone: test_wire_refusals.py
def test_ten_thousand_junk_messages_per_socket_are_refused_counted_and_change_nothing():
    rng = random.Random(2026)
    settings = dict(max_new_tokens=1200)
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        undisturbed = e.generate(PROMPTS, **settings)
        job = e.submit(PROMPTS, **settings)
        wait_until_started(job)
        seqs = job.sequence_ids
        endpoints = e.endpoints
        ctx = zmq.Context()
        try:
            # compromised workers 7-10 (this run has 4): each speaks under its own name and identity
            forged = [insider(ctx, zmq.DEALER, e, f"w{i}".encode(), f"draft-{i}") for i in range(7, 11)]
            for sock in forged:
                sock.connect(endpoints["verify"])
            push = insider(ctx, zmq.PUSH, e)
            push.connect(endpoints["telemetry"])
            strangers = [insider(ctx, zmq.DEALER, e, f"fc{i}".encode()) for i in range(4)]  # names no child has
            for sock in strangers:
                sock.connect(endpoints["control"])
            for n in range(AT_VERIFIER):
                forged[n % len(forged)].send_multipart(junk(rng, VERIFIER_KINDS, seqs))
            for _ in range(AT_ENGINE):
                push.send_multipart(junk(rng, TELEMETRY_KINDS, seqs))
            for n in range(AT_CONTROL):
                strangers[n % len(strangers)].send_multipart(junk(rng, CONTROL_KINDS, seqs))
            for sock in (*forged, push, *strangers):
                sock.close()
        finally:
            ctx.term()  # waits (LINGER) until every frame is out
        assert not job.done(), "the job ended before the junk was all sent: make it longer"
        record = job.result(timeout=120)
        assert not e.broken
    assert record.status == "ok", record.error
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert record.metrics.rejected_messages == AT_VERIFIER
    assert record.collected.rejected_telemetry == AT_ENGINE + AT_CONTROL


def test_junk_under_a_childs_name_on_the_control_socket_is_refused_not_a_crash():
    """A `ready` under the verifier's name whose array header overflows int64 ([2**32, 2**32] of int32: numpy's
    product wraps to 0 bytes) once crashed the engine with a traceback; it is refused and counted. Only a
    holder of the run's credentials can send it (the name is then taken over, ROUTER_HANDOVER: so no job
    follows here); a process without them is refused at the handshake (test_hostile_peers.py)."""
    import msgpack

    from specsched.runtime.core.wire import PROTOCOL_VERSION

    header = msgpack.packb({"v": PROTOCOL_VERSION, "kind": "ready", "arrays": [["x", "<i4", [2 ** 32, 2 ** 32]]]})
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        record = e.generate(PROMPTS, max_new_tokens=20)
        before = e.rejected_telemetry
        ctx = zmq.Context()
        try:
            sock = insider(ctx, zmq.DEALER, e, b"verifier", "verifier")
            sock.connect(e.endpoints["control"])
            sock.send_multipart([header, b""])
            sock.close()
        finally:
            ctx.term()
        deadline = time.monotonic() + 30
        while e.rejected_telemetry == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert e.rejected_telemetry == before + 1
        assert not e.broken
    assert record.status == "ok", record.error
