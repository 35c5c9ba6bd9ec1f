"""ZeroMQ plumbing: where sockets live, and the telemetry channel every child reports on.

Topology: the verifier binds a ROUTER (the run queue's front door); each draft worker connects a
DEALER with identity ``w<id>``. The engine binds a PULL socket; every child connects a PUSH to it for
events, commits and errors. The engine also binds a ROUTER for control; each child connects a DEALER
named after the process (``verifier``, ``draft-3``) and takes jobs, assignments and ``stop`` from it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

import zmq

from specsched.runtime.core.wire import pack

LINGER_MS = 5000  # on close, keep trying to deliver queued telemetry this long


@dataclass(frozen=True, slots=True)
class Endpoints:
    verify: str
    telemetry: str
    control: str

    def to_dict(self) -> dict:
        return asdict(self)


def make_endpoints(transport: str, run_dir: Path) -> Endpoints:
    if transport == "ipc":
        return Endpoints(*(f"ipc://{run_dir}/{name}.sock" for name in ("verify", "telemetry", "control")))
    return Endpoints(*(f"tcp://127.0.0.1:{_free_port()}" for _ in range(3)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_identity(worker: int) -> bytes:
    return f"w{worker}".encode()


def process_name(role: str, worker: int) -> str:
    """A child's name: its control identity, its log file and its key in the process table."""
    return "verifier" if role == "verifier" else f"draft-{worker}"


def connect_control(ctx: zmq.Context, endpoint: str, name: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, name.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


class Telemetry:
    """A child's PUSH socket to the supervisor."""

    def __init__(self, ctx: zmq.Context, endpoint: str) -> None:
        self.sock = ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, LINGER_MS)
        self.sock.connect(endpoint)
        self.pid = os.getpid()  # every message names its sender: the engine takes telemetry only from its children

    def send(self, kind: str, fields: dict | None = None, arrays: dict | None = None) -> None:
        self.sock.send_multipart(pack(kind, {"pid": self.pid, **(fields or {})}, arrays), copy=False)

    def events(self, rows: list[list]) -> None:
        if rows:
            self.send("events", {"rows": rows})

    def close(self) -> None:
        self.sock.close()
