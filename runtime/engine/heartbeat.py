"""Heartbeats: how the engine tells a stopped child from a busy one.

Each child runs a daemon thread that sends ``beat`` over a PUSH socket of its own (a ZeroMQ socket is
never shared between threads) every ``BEAT_S`` seconds. The thread keeps beating while the main thread
is inside a torch forward (torch releases the GIL) or waits on a socket, so a child falls silent only
when the whole process stops: SIGSTOP, a debugger, a deadlock that holds the GIL. The engine kills a
draft worker serving a job that has been silent for ``--heartbeat-timeout`` seconds (SIGKILL ends a
stopped process too), and the supervisor restarts it like any other death (supervisor.py). A forward
that runs on and on while the process beats is not caught by this; a policy's pick that does is stopped
by its deadline (runtime/core/deadline.py).
"""

from __future__ import annotations

import threading

import zmq

from ..core.security import Keys
from ..core.transport import connect, wire_pid
from ..core.wire import pack

BEAT_S = 0.25


class Heartbeat:
    def __init__(self, ctx: zmq.Context, endpoint: str, role: str, worker: int, keys: Keys | None = None) -> None:
        self._stop = threading.Event()
        self._fields = {"role": role, "worker": worker, "pid": wire_pid()}
        self._thread = threading.Thread(target=self._beat, args=(ctx, endpoint, keys), name="heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, ctx: zmq.Context, endpoint: str, keys: Keys | None) -> None:
        sock = connect(ctx, zmq.PUSH, endpoint, keys)
        sock.setsockopt(zmq.SNDHWM, 4)  # an engine that is not reading needs no backlog of beats
        try:
            while not self._stop.wait(BEAT_S):
                try:
                    sock.send_multipart(pack("beat", self._fields), zmq.NOBLOCK)
                except zmq.Again:
                    pass
        finally:
            sock.close()

    def stop(self) -> None:
        """Before the context ends (its term waits for every socket to close)."""
        self._stop.set()
        self._thread.join(timeout=2)
