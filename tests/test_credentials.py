"""Per-child credentials on ipc (runtime/core/security.py): each child holds its own name's password only, so
it can neither pass a handshake under another name nor claim another child's socket identity; the servers,
holding the run's secret, check both."""

from __future__ import annotations

import time

import pytest
import zmq

from specsched.runtime.core.gatekeeper import Gatekeeper
from specsched.runtime.core.security import Keys, secure_client, secure_server, speaker
from specsched.runtime.core.transport import end_context, identity_name

RUN = Keys.for_ipc()


def test_a_child_holds_its_own_password_and_not_the_secret():
    draft0, verifier = RUN.as_user("draft-0"), RUN.as_user("verifier", keep_secret=True)
    assert draft0.secret == "" and verifier.secret == RUN.secret
    assert draft0.password != RUN.as_user("draft-1").password
    assert RUN.admits(b"draft-0", draft0.password.encode())
    assert not RUN.admits(b"draft-1", draft0.password.encode())    # its password is not another name's
    assert not draft0.admits(b"draft-0", draft0.password.encode())  # a child admits nobody: no secret


def test_a_child_cannot_compute_another_childs_socket_identity():
    draft0 = RUN.as_user("draft-0")
    mine = draft0.routing_id("w0", "draft-0")
    assert mine == RUN.routing_id("w0", "draft-0") and mine.startswith(b"w0.")
    with pytest.raises(ValueError):
        draft0.routing_id("w1", "draft-1")
    assert RUN.logical_id(mine, identity_name) == b"w0"
    for claim in (b"w1", draft0.routing_id("w1", "draft-0"), b"w1." + mine.partition(b".")[2], b"\xff.x"):
        assert RUN.logical_id(claim, identity_name) is None


def test_every_message_carries_the_name_its_sender_was_admitted_under(tmp_path):
    endpoint = f"ipc://{tmp_path}/credentials"  # not inproc: ZeroMQ runs no handshake there
    ctx = zmq.Context()
    gate = Gatekeeper(ctx, RUN).start()
    server, clients = ctx.socket(zmq.PULL), []
    try:
        secure_server(server, RUN)
        server.bind(endpoint)
        for name, keys in (("draft-3", RUN.as_user("draft-3")), ("forger", Keys("", "", "", password="x" * 64,
                                                                                 user="draft-4"))):
            c = ctx.socket(zmq.PUSH)
            c.setsockopt(zmq.LINGER, 0)
            c.setsockopt(zmq.SNDTIMEO, 5000)  # not NOBLOCK: on a busy machine the pipe may not be up yet (Again)
            secure_client(c, keys)
            c.connect(endpoint)
            clients.append(c)
            try:
                c.send(name.encode())
            except zmq.Again:
                assert name == "forger"  # a refused handshake may leave no pipe to queue on: nothing is sent
        assert server.poll(5000)
        frames = server.recv_multipart(copy=False)
        assert frames[0].bytes == b"draft-3" and speaker(frames) == b"draft-3"
        assert not server.poll(300)  # the forger's handshake was refused: nothing of it arrives
    finally:
        for s in (*clients, server):
            s.close(linger=0)
        # The forger's socket retries its handshake every 100 ms, each one a ZAP request: the gatekeeper keeps
        # answering while the closes settle, and the context ends as the runtime's processes end theirs, within
        # a bound (end_context: libzmq's term hung here once, in a fresh-clone run on 2026-12-02).
        time.sleep(0.3)
        gate.stop()
        end_context(ctx)
