"""The wire under attack: ten thousand junk messages - malformed, truncated, oversized, another version,
the wrong round or epoch, forged identities and pids - at the verifier's socket and at the engine's
telemetry socket during a live run. None crashes anything, every one is refused and counted, and the
run's output is the undisturbed run's."""

from __future__ import annotations

import random
import time

import pytest
import zmq
from fuzz_frames import TELEMETRY_KINDS, VERIFIER_KINDS, junk
from helpers import sim_config, words

from specsched.runtime.engine.engine import Engine

VOCAB = 16
PROMPTS = [words(VOCAB, (i + 1, i + 3)) for i in range(4)]
AT_VERIFIER, AT_ENGINE = 6_000, 4_000


@pytest.mark.slow  # 14 s of CPU, in the slow set (CI); each kind of refusal alone: test_wire_refusals.py
def test_ten_thousand_junk_messages_are_refused_counted_and_change_nothing():
    rng = random.Random(2026)
    settings = dict(max_new_tokens=400)
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        undisturbed = e.generate(PROMPTS, **settings)
        job = e.submit(PROMPTS, **settings)
        deadline = time.monotonic() + 60
        while not job.collected.tokens:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        seqs = [job._run.first_seq + i for i in range(len(PROMPTS))]
        endpoints = e.endpoints
        ctx = zmq.Context()
        try:
            forged = [ctx.socket(zmq.DEALER) for _ in range(4)]  # identities no worker has
            for i, sock in enumerate(forged):
                sock.setsockopt(zmq.IDENTITY, f"fz{i}".encode())
                sock.setsockopt(zmq.LINGER, 5000)
                sock.connect(endpoints["verify"])
            push = ctx.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 5000)
            push.connect(endpoints["telemetry"])
            for n in range(AT_VERIFIER):
                forged[n % len(forged)].send_multipart(junk(rng, VERIFIER_KINDS, seqs))
            for _ in range(AT_ENGINE):
                push.send_multipart(junk(rng, TELEMETRY_KINDS, seqs))
            for sock in (*forged, push):
                sock.close()
        finally:
            ctx.term()  # waits (LINGER) until every frame is out
        assert not job.done(), "the job ended before the junk was all sent: make it longer"
        record = job.result(timeout=120)
        assert not e.broken
    assert record.status == "ok", record.error
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert record.metrics.rejected_messages == AT_VERIFIER
    assert record.collected.rejected_telemetry == AT_ENGINE


def test_junk_under_a_childs_name_on_the_control_socket_is_refused_not_a_crash():
    """A `ready` under the verifier's name whose array header overflows int64 ([2**32, 2**32] of int32: numpy's
    product wraps to 0 bytes) once crashed the engine with a traceback; it is refused and counted. (The
    name itself is taken over by the sender, ROUTER_HANDOVER: issue 43's item 3, open; so no job follows.)"""
    import msgpack

    from specsched.runtime.core.wire import PROTOCOL_VERSION

    header = msgpack.packb({"v": PROTOCOL_VERSION, "kind": "ready", "arrays": [["x", "<i4", [2 ** 32, 2 ** 32]]]})
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=8)) as e:
        record = e.generate(PROMPTS, max_new_tokens=20)
        dispatcher = e._dispatcher
        before = dispatcher.rejected_telemetry
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, b"verifier")
            sock.setsockopt(zmq.LINGER, 5000)
            sock.connect(e.endpoints["control"])
            sock.send_multipart([header, b""])
            sock.close()
        finally:
            ctx.term()
        deadline = time.monotonic() + 30
        while dispatcher.rejected_telemetry == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert dispatcher.rejected_telemetry == before + 1
        assert not e.broken
    assert record.status == "ok", record.error
