"""A process's ZeroMQ context ends within a bound, even when libzmq's term would wait forever."""

from __future__ import annotations

import time

import zmq

from specsched.runtime.core.transport import end_context


def test_a_context_whose_term_never_returns_does_not_hold_its_process(capfd):
    ctx = zmq.Context()
    held = ctx.socket(zmq.PULL)  # never closed before the term: libzmq's term waits for it forever
    t0 = time.monotonic()
    assert end_context(ctx, within_s=0.5) is False
    assert time.monotonic() - t0 < 5.0
    assert "did not end within" in capfd.readouterr().err
    held.close(linger=0)  # lets the term going on in the background finish


def test_a_context_whose_sockets_are_closed_ends_at_once():
    ctx = zmq.Context()
    ctx.socket(zmq.PUSH).close(linger=0)
    assert end_context(ctx, within_s=5.0) is True
    assert ctx.closed
