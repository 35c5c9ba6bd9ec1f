"""What the wire refuses: a draft whose parents point forward cannot be built, anything malformed is
a ProtocolError, a draft whose q or point masses do not fit is refused, and a verifier that is sent
garbage, or a draft for a sequence outside the run, counts it and carries on.
"""

from __future__ import annotations

import textwrap
import threading

import msgpack
import numpy as np
import pytest
import zmq
from helpers import greedy_reference, outputs, run_ok, sim_config, words

from specsched.runtime.apps.run.app import run
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.security import Keys, secure_client
from specsched.runtime.core.wire import PROTOCOL_VERSION, REFUSED, ProtocolError, pack, unpack
from specsched.runtime.engine import dispatcher


def test_drafts_with_parents_pointing_forward_are_refused():
    with pytest.raises(ValueError, match="earlier tokens"):
        Draft(0, 0, 0, np.array([1, 2], np.int32), np.array([-1, 1], np.int32))
    with pytest.raises(ValueError, match="parent indices"):
        Draft(0, 0, 0, np.array([1, 2], np.int32), np.array([-1], np.int32))


def _header(**fields) -> bytes:
    return msgpack.packb({"v": PROTOCOL_VERSION, "kind": "draft", "arrays": [], **fields})


def _good_frames() -> list:
    return [bytes(f) for f in Draft.chain(1, 1, 0, [1, 2, 3]).to_frames()]


MALFORMED = {
    "empty message": [],
    "garbage header": [b"\xc1\xc1\xc1 not msgpack"],
    "truncated msgpack": [_header()[:-3]],
    "header not a map": [msgpack.packb([1, "draft"])],
    "no version": [msgpack.packb({"kind": "draft", "arrays": []})],
    "wrong version": [_header(v=PROTOCOL_VERSION + 1)],
    "version as text": [_header(v=str(PROTOCOL_VERSION))],
    "unknown kind": [_header(kind="reboot")],
    "missing kind": [msgpack.packb({"v": PROTOCOL_VERSION, "arrays": []})],
    "more frames than arrays": [_header(), b"\x00\x00\x00\x00"],
    "fewer frames than arrays": [_header(arrays=[["tokens", "<i4", [1]]])],
    "wrong byte count": [_good_frames()[0], _good_frames()[1][:-1], _good_frames()[2]],
    "object dtype": [_header(arrays=[["x", "|O", [1]]]), b"\x00" * 8],
    "unicode dtype": [_header(arrays=[["x", "<U1", [1]]]), b"\x00" * 4],
    "negative shape": [_header(arrays=[["x", "<i4", [-1]]]), b""],
    "shape not a list": [_header(arrays=[["x", "<i4", 3]]), b"\x00" * 12],
    "shape whose size wraps int64 to 0": [_header(arrays=[["x", "<i4", [2 ** 32, 2 ** 32]]]), b""],
    "shape with a bool": [_header(arrays=[["x", "<i4", [True]]]), b"\x00" * 4],
    "array entry not a triple": [_header(arrays=[["x", "<i4"]]), b""],
    "arrays not a list": [_header(arrays="x")],
}


@pytest.mark.parametrize("frames", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_frames_raise_protocol_error(frames):
    with pytest.raises(ProtocolError):
        unpack(frames)


def test_the_good_frames_used_above_do_parse():
    # The malformed cases are small edits of these: make sure the edit is what breaks them.
    assert unpack(_good_frames()).kind == "draft"
    assert unpack([_header()]).kind == "draft"


def _sampled(point: np.ndarray | None = None, *, q_rows: int = 1, vocab: int = 8, **arrays) -> list:
    """A sampled draft of three candidates (parents -1, 0, 1) with `q_rows` dense rows and mask `point`."""
    base = {"tokens": np.array([3, 1, 4], np.int32), "parents": np.array([-1, 0, 1], np.int32),
            "q": np.full((q_rows, vocab), 1 / vocab, np.float32)}
    if point is not None:
        base["point"] = point
    return pack("draft", {"seq": 1, "worker": 1, "round": 0}, {**base, **arrays})


MALFORMED_Q = {
    "mask of int32": _sampled(np.array([0, 1, 1], np.int32)),
    "mask too long": _sampled(np.array([False, True, True, True])),
    "mask too short": _sampled(np.array([True, True]), q_rows=0),
    "mask of 2-D": _sampled(np.array([[False, True, True]])),
    "mask byte not a bool": _sampled(np.array([0, 2, 1], np.uint8).view(bool)),
    "more rows than non-points": _sampled(np.array([False, True, True]), q_rows=2),
    "fewer rows than non-points": _sampled(np.array([False, False, True]), q_rows=1),
    "a point mass on a lane": pack("draft", {"seq": 1, "worker": 1, "round": 0, "lanes": 1},
                                   {"tokens": np.array([3, 1, 4], np.int32), "parents": np.array([-1, 0, -1], np.int32),
                                    "q": np.zeros((0, 8), np.float32), "point": np.ones(3, bool)}),
    "mask without q": pack("draft", {"seq": 1, "worker": 1, "round": 0},
                           {"tokens": np.array([3], np.int32), "parents": np.array([-1], np.int32),
                            "point": np.ones(1, bool)}),
    "q of one dimension": _sampled(q=np.zeros(8, np.float32)),
}


@pytest.mark.parametrize("frames", MALFORMED_Q.values(), ids=MALFORMED_Q.keys())
def test_a_draft_whose_q_or_point_masses_do_not_fit_is_refused(frames):
    with pytest.raises(REFUSED):
        Draft.from_message(unpack([bytes(f) for f in frames]))


def test_the_sampled_draft_the_q_cases_edit_does_parse():
    got = Draft.from_message(unpack([bytes(f) for f in _sampled(np.array([False, True, True]))]))
    assert got.q.point.tolist() == [False, True, True] and got.q.dense.shape == (1, 8)


def test_pack_refuses_unknown_kinds_and_object_arrays():
    with pytest.raises(ProtocolError):
        pack("reboot")
    with pytest.raises(ProtocolError):
        pack("draft", arrays={"x": np.array([object()])})


def run_credentials(monkeypatch) -> dict:
    """The next run's ipc credentials, caught as the engine makes them: what a compromised child holds (a
    process without them is refused at the handshake: test_hostile_peers.py)."""
    made, original = {}, Keys.for_ipc

    def for_ipc() -> Keys:
        made["keys"] = original()
        return made["keys"]

    monkeypatch.setattr(Keys, "for_ipc", staticmethod(for_ipc))
    return made


def compromised(sock: zmq.Socket, keys: Keys) -> None:
    """`sock` speaks as a compromised worker 9 (the runs here have 2): under its own name and identity, the only
    ones its credentials allow."""
    sock.setsockopt(zmq.IDENTITY, keys.routing_id("w9", "draft-9"))
    secure_client(sock, keys.as_user("draft-9"))


def test_a_verifier_sent_garbage_counts_it_and_finishes_the_run(monkeypatch, tmp_path):
    """A DEALER holding the run's credentials connects to the verifier's endpoint during a real run and
    sends junk."""
    junk = [
        [b"\xc1 garbage"],
        [_header(v=99)],
        [_header(kind="reboot")],
        [_good_frames()[0], _good_frames()[1][:-2], _good_frames()[2]],       # wrong byte count
        [_header(arrays=[["x", "|O", [1]]]), b"\x00" * 8],                      # bad dtype
        pack("verdict", {"seq": 0}),                                            # a kind the verifier never takes
        pack("draft", {"seq": 0}),                                              # a draft with no fields
    ]
    # The verifier must still be serving when the junk lands, whatever the timing: fcfs, except that
    # its first pick waits until the junk has been delivered to the verifier's socket (the flag).
    sent = tmp_path / "junk-sent"
    policy = tmp_path / "after_junk.py"
    policy.write_text(textwrap.dedent(f"""
        import os, time
        from specsched.policies.fcfs import FCFS

        class AfterJunk(FCFS):
            name = "after-junk"
            waited = False

            def pick(self, ready):
                deadline = time.monotonic() + 120   # a bounded wait: a lost flag fails the count, not CI
                while not self.waited and not os.path.exists({str(sent)!r}) and time.monotonic() < deadline:
                    time.sleep(0.005)
                self.waited = True
                return super().pick(ready)
    """))
    config = sim_config(workers=2, max_new_tokens=200, k=3, sim_verify_ms=5, policy=f"{policy}:AfterJunk")
    reference = outputs(run_ok(sim_config(workers=2, max_new_tokens=200, k=3, sim_verify_ms=5)))

    threads = []
    make_endpoints = dispatcher.make_endpoints
    made = run_credentials(monkeypatch)

    def intercept(transport, run_dir, *listen):
        endpoints = make_endpoints(transport, run_dir, *listen)

        def send_junk():
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, -1)  # queued until the verifier binds, then all delivered
            compromised(sock, made["keys"])
            sock.connect(endpoints.verify)
            for frames in junk:
                sock.send_multipart(frames)
            sock.close()
            ctx.term()                       # returns once every message has been handed over
            sent.touch()

        threads.append(threading.Thread(target=send_junk, daemon=True))
        threads[-1].start()
        return endpoints

    monkeypatch.setattr(dispatcher, "make_endpoints", intercept)
    record = run_ok(config)
    threads[0].join(timeout=30)
    assert not threads[0].is_alive() and sent.exists()
    assert record.metrics.rejected_messages == len(junk)
    assert outputs(record) == reference


def test_a_draft_for_a_sequence_outside_the_run_is_rejected_and_counted(monkeypatch, tmp_path):
    vocab, prompts = 64, [(5, 7), (3, 9)]
    # The verifier must still be serving when the stranger's draft lands, however late the supervisor
    # sends it: fcfs, except that the second pick waits until the draft has been delivered (the flag).
    # The first pick goes ahead, so the run is verifying when the draft is sent.
    sent = tmp_path / "stranger-sent"
    policy = tmp_path / "after_stranger.py"
    policy.write_text(textwrap.dedent(f"""
        import os, time
        from specsched.policies.fcfs import FCFS

        class AfterStranger(FCFS):
            name = "after-stranger"
            picks = 0

            def pick(self, ready):
                self.picks += 1
                deadline = time.monotonic() + 120   # a bounded wait: a lost flag fails the count, not CI
                while self.picks == 2 and not os.path.exists({str(sent)!r}) and time.monotonic() < deadline:
                    time.sleep(0.005)
                return super().pick(ready)
    """))
    endpoints = {}
    make_endpoints = dispatcher.make_endpoints
    made = run_credentials(monkeypatch)

    def intercept(transport, run_dir, *listen):
        endpoints["e"] = make_endpoints(transport, run_dir, *listen)
        return endpoints["e"]

    def on_update(collected):
        # once the run is verifying, a stranger sends a valid-looking first draft of "sequence 5"
        if collected.tokens and not sent.exists():
            ctx = zmq.Context()
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 60_000)  # bounded: a verifier that never reads fails the count
            compromised(sock, made["keys"])
            sock.connect(endpoints["e"].verify)
            sock.send_multipart(Draft.chain(5, 0, 0, [1, 2, 3], prompt=np.array([9, 9], np.int32)).to_frames())
            sock.close()
            ctx.term()                            # returns once the draft has been handed over
            sent.touch()

    monkeypatch.setattr(dispatcher, "make_endpoints", intercept)
    record = run(sim_config(workers=2, prompts=[words(vocab, p) for p in prompts], max_new_tokens=200, k=3,
                            sim_verify_ms=5, policy=f"{policy}:AfterStranger"), on_update=on_update)
    assert record.status == "ok" and sent.exists()
    assert outputs(record) == [greedy_reference(p, vocab, 200) for p in prompts]
    assert record.metrics.tokens == 400
    assert record.metrics.rejected_messages == 1
