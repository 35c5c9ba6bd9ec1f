"""The gatekeeper: a binding process's ZAP handler, and its count of refused handshakes.

ZeroMQ asks the ZAP handler of a socket's context (RFC 27: a REP socket at ``inproc://zeromq.zap.01``)
about every handshake; it answers 200 for a CURVE client key the run admits (tcp) or a PLAIN name whose
password it is (ipc; the name becomes every message's ``User-Id``: security.py), and 400 for anything else.
Handshakes that fail - a key it refused, a peer that speaks no CURVE, bytes that are not ZMTP - are
seen on socket monitors and counted: ``refused`` is what the record calls ``refused_handshakes``. A
refused client's library retries (ZeroMQ reconnects), so the count is of handshakes, not of peers.
One daemon thread per binding process; its sockets are its own (a ZeroMQ socket is never shared
between threads).
"""

from __future__ import annotations

import threading

import zmq
from zmq.utils import z85

from .security import Keys
from .transport import connect, wire_pid
from .wire import pack

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
REFUSALS = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


class Gatekeeper:
    def __init__(self, ctx: zmq.Context, keys: Keys, *, report_to: str | None = None) -> None:
        """Bind the ZAP handler: call before any CURVE server socket of `ctx` binds. A child's gatekeeper
        reports its running count to the engine's telemetry endpoint `report_to` (``refused``)."""
        self.refused = 0
        self._ctx, self._keys, self._report_to = ctx, keys, report_to
        self._admitted = {k.encode() for k in keys.admitted}
        self._zap = ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)
        self._monitors: list[zmq.Socket] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, sock: zmq.Socket) -> None:
        """Count the refused handshakes of `sock` (before start)."""
        self._monitors.append(sock.get_monitor_socket(REFUSALS))

    def start(self) -> Gatekeeper:
        self._thread = threading.Thread(target=self._serve, name="gatekeeper", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        poller = zmq.Poller()
        for s in (self._zap, *self._monitors):
            poller.register(s, zmq.POLLIN)
        report = None if self._report_to is None else connect(self._ctx, zmq.PUSH, self._report_to, self._keys)
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(100):
                    if sock is self._zap:
                        self._answer(sock.recv_multipart())
                    else:
                        sock.recv_multipart()  # (event, value) and the peer's address: the count is enough
                        self.refused += 1
                        if report is not None:
                            report.send_multipart(pack("refused", {"pid": wire_pid(), "count": self.refused}))
        finally:
            for s in (self._zap, *self._monitors, *([report] if report is not None else [])):
                s.close(linger=0)

    def _answer(self, request: list[bytes]) -> None:
        """RFC 27: version, request id, domain, address, identity, mechanism, credentials."""
        version, request_id, mechanism = request[0], request[1], request[5] if len(request) > 5 else b""
        credentials = request[6:]
        plain = mechanism == b"PLAIN" and len(credentials) == 2 and self._keys.admits(*credentials)
        ok = plain or (mechanism == b"CURVE" and len(credentials) == 1
                       and z85.encode(credentials[0]) in self._admitted)
        self._zap.send_multipart([version, request_id, b"200" if ok else b"400",
                                  b"OK" if ok else b"key not admitted", credentials[0] if plain else b"", b""])

    def stop(self) -> None:
        """Before the context ends (its term waits for every socket to close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        else:
            for s in (self._zap, *self._monitors):
                s.close(linger=0)
