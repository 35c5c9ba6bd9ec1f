"""ZeroMQ plumbing: where sockets live, and the telemetry channel every child reports on.

Topology: the verifier binds a ROUTER (the run queue's front door); each draft worker connects a
DEALER with identity ``w<id>``. The engine binds a PULL socket; every child connects a PUSH to it for
events, commits and errors. The engine also binds a ROUTER for control; each child connects a DEALER
named after the process (``verifier``, ``draft-3``) and takes jobs, assignments and ``stop`` from it.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import zmq

from .config import ConfigError, TransportKind
from .leftovers import owned, remove_dead
from .security import Keys, secure_client
from .wire import ProtocolError, pack

LINGER_MS = 5000  # on close, keep trying to deliver queued telemetry this long
END_WITHIN_S = LINGER_MS / 1000 + 5.0  # end_context: the telemetry's linger, then 5 s for the rest


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the run's processes connect; a server binds the same address, or every interface
    (``bind_all``: ``--listen 0.0.0.0:PORT``, whose local children connect over loopback)."""

    verify: str
    telemetry: str
    control: str
    bind_all: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def bind(self, endpoint: str) -> str:
        return f"tcp://*:{port_of(endpoint)}" if self.bind_all else endpoint


SUN_PATH_MAX = 107  # bytes of a Unix socket's path on Linux (sockaddr_un.sun_path: 108 with its NUL)


def private_dir(prefix: str, longest_name: str) -> Path:
    """A new directory only this user reaches (0700), for ipc sockets named at most like `longest_name`: in
    the temp directory, or in /tmp when a socket there would have a longer path than a Unix socket may (a
    deep TMPDIR), so that a run never fails for where it was started. Its name carries this process's pid:
    the folders there of processes killed before they could remove theirs are removed first."""
    where = tempfile.gettempdir()
    if len(os.fsencode(os.path.join(where, f"{owned(prefix)}{'x' * 8}", longest_name))) > SUN_PATH_MAX:
        where = "/tmp"
    remove_dead(Path(where), prefix)
    path = Path(tempfile.mkdtemp(prefix=owned(prefix), dir=where))
    os.chmod(path, 0o700)
    return path


def make_endpoints(transport: str, run_dir: Path, listen: str | None = None) -> Endpoints:
    """ipc: sockets in the private run directory. tcp: loopback ports; with ``listen`` (HOST:PORT) the
    control socket - the one a worker on another host names in ``--connect`` - at that port and the
    others at free ports of HOST."""
    if transport == TransportKind.IPC:
        return Endpoints(*(f"ipc://{run_dir}/{name}.sock" for name in ("verify", "telemetry", "control")))
    host, port = split_host_port(listen) if listen else ("127.0.0.1", 0)
    bind_all = host in ("0.0.0.0", "*")
    host = "127.0.0.1" if bind_all else host
    try:
        verify, telemetry = (f"tcp://{host}:{_free_port(host)}" for _ in range(2))
        control = f"tcp://{host}:{port or _free_port(host)}"
    except OSError as exc:  # a name that resolves to nothing, an address that is not this machine's
        where = f"--listen {listen}" if listen else f"tcp on {host}"
        raise ConfigError(f"{where}: cannot listen there: {exc.strerror or exc}") from None
    return Endpoints(verify, telemetry, control, bind_all)


def split_host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def port_of(endpoint: str) -> int:
    return int(endpoint.rpartition(":")[2])


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_wire_pid: int | None = None


def wire_pid() -> int:
    """The pid this process names itself by in every message: its own, or - a worker on another host,
    whose pids may collide with the engine's children - the one the engine gave it when it joined."""
    return os.getpid() if _wire_pid is None else _wire_pid


def adopt_wire_pid(pid: int) -> None:
    global _wire_pid
    _wire_pid = pid


def worker_identity(worker: int) -> bytes:
    return f"w{worker}".encode()


def check_sender(reply_to: bytes, worker: int, what: str) -> None:
    """The one ownership check: a message that speaks for worker `worker` (its draft, tree, resume, join or
    probe) must come from that worker's socket - on ipc its identity's tag proves whose it is (security.py).
    Raises ProtocolError."""
    if reply_to != worker_identity(worker):
        raise ProtocolError(f"{what} from {reply_to!r}, not from its worker {worker}")


def identity_name(identity: bytes) -> bytes:
    """The process name (a draft worker's) whose socket to the verifier carries `identity`; b"" if none."""
    return b"draft-" + identity[1:] if identity.startswith(b"w") and identity[1:].isdigit() else b""


def process_name(role: str, worker: int) -> str:
    """A child's name: its control identity, its log file and its key in the process table."""
    return "verifier" if role == "verifier" else f"draft-{worker}"


def connect(ctx: zmq.Context, kind: int, endpoint: str, keys: Keys | None, *, identity: str | bytes | None = None,
            linger_ms: int = 0) -> zmq.Socket:
    """A socket of the run, connected to `endpoint` with the run's credentials (security.py)."""
    sock = ctx.socket(kind)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity.encode() if isinstance(identity, str) else identity)
    sock.setsockopt(zmq.LINGER, linger_ms)
    secure_client(sock, keys)
    sock.connect(endpoint)
    return sock


def connect_control(ctx: zmq.Context, endpoint: str, name: str, keys: Keys | None = None) -> zmq.Socket:
    return connect(ctx, zmq.DEALER, endpoint, keys, identity=keys.routing_id(name, name) if keys else name)


class Telemetry:
    """A child's PUSH socket to the supervisor."""

    def __init__(self, ctx: zmq.Context, endpoint: str, keys: Keys | None = None) -> None:
        self.sock = connect(ctx, zmq.PUSH, endpoint, keys, linger_ms=LINGER_MS)
        self.pid = wire_pid()  # every message names its sender: the engine takes telemetry only from its children

    def send(self, kind: str, fields: dict | None = None, arrays: dict | None = None) -> None:
        self.sock.send_multipart(pack(kind, {"pid": self.pid, **(fields or {})}, arrays), copy=False)

    def events(self, rows: list[list]) -> None:
        if rows:
            self.send("events", {"rows": rows})

    def close(self) -> None:
        self.sock.close()


def end_context(ctx: zmq.Context, within_s: float = END_WITHIN_S) -> bool:
    """Terminate `ctx` (every socket closed first), waiting at most `within_s`; False, with one line on stderr,
    when its term did not end. libzmq can wait forever for a socket that served ZAP handshakes
    (zeromq/libzmq#2733, open): a term that never returns would keep a finished process alive. The term goes
    on in a daemon thread, which holds the context, and ends with the process."""
    ender = threading.Thread(target=ctx.term, name="zmq-term", daemon=True)
    ender.start()
    ender.join(within_s)
    if ender.is_alive():
        print(f"specsched: ZeroMQ context did not end within {within_s:.0f} s; leaving it to the process exit",
              file=sys.stderr)
        return False
    return True
