"""The wire protocol's round trip: drafts and verdicts survive real ZeroMQ frames bit for bit (what
the wire refuses is tested in test_wire_refusals.py).
"""

from __future__ import annotations

import itertools

import msgpack
import numpy as np
import zmq

from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.messages import Draft, Verdict
from specsched.runtime.core.wire import unpack

_ADDRESSES = itertools.count()


def through_zmq(frames: list) -> list:
    """Send frames over a real socket pair and receive them zero-copy, as the runtime does."""
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    address = f"inproc://wire-test-{next(_ADDRESSES)}"
    try:
        a.bind(address)
        b.connect(address)
        a.send_multipart(frames, copy=False)
        assert b.poll(5000)
        return b.recv_multipart(copy=False)
    finally:
        a.close(linger=0)
        b.close(linger=0)


def test_a_sampled_draft_round_trips_with_q_bit_for_bit():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(11), size=3).astype(np.float32)
    sent = Draft.chain(seq=5, worker=2, round=7, tokens=[3, 1, 4], q=DraftQ.rows(q),
                       prompt=np.array([9, 8, 7], np.int32), sent_at=123.25)
    got = Draft.from_message(unpack(through_zmq(sent.to_frames())))
    assert (got.seq, got.worker, got.round, got.sent_at) == (5, 2, 7, 123.25)
    assert got.tokens.tolist() == [3, 1, 4]
    assert got.parents.tolist() == [-1, 0, 1]
    assert got.prompt.tolist() == [9, 8, 7]
    assert got.q.dense.dtype == np.float32 and not got.q.point.any()
    # the q the verifier divides by is exactly the q the worker sampled from
    assert np.array_equal(got.q.dense.view(np.uint32), q.view(np.uint32))


def test_a_greedy_tree_draft_round_trips_without_q_or_prompt():
    sent = Draft(1, 0, 3, np.array([5, 6, 7, 8], np.int32), np.array([-1, 0, 0, 2], np.int32))
    got = Draft.from_message(unpack(through_zmq(sent.to_frames())))
    assert got.q is None and got.prompt is None
    assert got.tokens.tolist() == [5, 6, 7, 8] and got.parents.tolist() == [-1, 0, 0, 2]


def test_an_empty_draft_round_trips():
    # At the token limit a worker sends no draft tokens and the verifier adds only its own token.
    sent = Draft.chain(0, 0, 4, [], q=DraftQ.of([], 8))
    got = Draft.from_message(unpack(through_zmq(sent.to_frames())))
    assert got.tokens.tolist() == [] and got.q.dense.shape == (0, 8) and len(got.q) == 0


def test_a_mixed_draft_round_trips_its_point_masses_and_dense_rows_bit_for_bit():
    # a model's tree (dense rows), a looked-up token and two cache candidates (point masses), then a lane
    vocab, rng = 64, np.random.default_rng(1)
    rows = rng.dirichlet(np.ones(vocab), size=2).astype(np.float32)
    q = DraftQ.of([rows[0], rows[1], None], vocab).then_points(2)
    sent = Draft(2, 1, 4, np.array([7, 8, 9, 10, 11, 12], np.int32), np.array([-1, 0, 1, -1, -1, -1], np.int32),
                 q, lanes=1)
    frames = sent.to_frames()
    got = Draft.from_message(unpack(through_zmq(frames)))
    assert got.q.point.tolist() == [False, False, True, True, True] and got.lanes == 1
    assert np.array_equal(got.q.dense.view(np.uint32), rows.view(np.uint32))
    layout = {name: shape for name, _, shape in msgpack.unpackb(frames[0])["arrays"]}
    assert layout == {"tokens": [6], "parents": [6], "q": [2, vocab], "point": [5]}  # no row for a point mass
    dense_only = Draft.chain(0, 0, 0, [1, 2], q=DraftQ.rows(rows)).to_frames()
    assert "point" not in [a[0] for a in msgpack.unpackb(dense_only[0])["arrays"]]  # no mask when none


def test_a_verdict_round_trips():
    sent = Verdict(seq=3, round=2, accepted=2, tokens=np.array([4, 4, 9], np.int32),
                   path=np.array([0, 1], np.int32), done=True, verify_start=1.5, verify_end=2.75)
    got = Verdict.from_message(unpack(through_zmq(sent.to_frames())))
    assert (got.seq, got.round, got.accepted, got.done) == (3, 2, 2, True)
    assert got.tokens.tolist() == [4, 4, 9] and got.path.tolist() == [0, 1]
    assert (got.verify_start, got.verify_end) == (1.5, 2.75)
