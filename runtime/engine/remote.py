"""A draft worker on another host: ``specsched worker --connect tcp://HOST:PORT --key worker.key``.

It knocks at the engine's control socket (joining.py has the engine's side), learns what the engine
runs, loads its own draft model - the engine's draft resolved on this host, or ``--draft DIR`` - and
says hello with that draft's vocabulary; a welcomed worker then serves exactly as a child the engine
forked would (child.run), under the worker id and the pid the engine gave it. It stays until the engine
stops it or goes away: the knock's connection stays open with ZeroMQ heartbeats, and once it has been
down for ``ENGINE_GONE_S`` the worker exits.
"""

from __future__ import annotations

import secrets
import socket
import time

import zmq
from zmq.utils.monitor import parse_monitor_message

from ..backends.backend import get_backend
from ..core.config import ConfigError, RunConfig
from ..core.process import set_title
from ..core.security import Keys
from ..core.transport import Endpoints, adopt_wire_pid, connect, end_context
from ..core.wire import REFUSED, pack, unpack
from . import child

ENGINE_GONE_S = 5.0  # the engine unreachable this long: it has gone, and so does the worker


class Refused(Exception):
    """The engine would not take this worker (exit 2), or never answered (exit 1)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def join(endpoint: str, keys: Keys, overrides: dict, *, timeout_s: float = 30.0) -> int:
    """Join the engine at `endpoint` and serve it until stopped; returns the exit status. Raises Refused."""
    ctx = zmq.Context()
    door = connect(ctx, zmq.DEALER, endpoint, keys, identity=f"join-{secrets.token_hex(6)}")
    door.setsockopt(zmq.HEARTBEAT_IVL, 1000)     # ZMTP pings: a vanished host drops the connection too
    door.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3000)
    watch = door.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
    try:
        door.send_multipart(pack("join", {}))
        answer = _answer(door, endpoint, timeout_s)
        config = RunConfig.from_dict({**answer["config"], **overrides})
        backend = get_backend(config)
        vocabulary = backend.vocabulary("draft")
        model = backend.draft()
        door.send_multipart(pack("hello", {"vocabulary": vocabulary, "host": _address(endpoint)}))
        welcome = _answer(door, endpoint, timeout_s)
        adopt_wire_pid(int(welcome["pid"]))
        host = endpoint.rpartition(":")[0]  # the engine's ports, at the address this host reaches it by
        ports = welcome["ports"]
        spec = {"role": "draft", "worker": int(welcome["worker"]), "config": config.to_dict(),
                "keys": keys.to_dict(), "remote": True,
                "endpoints": Endpoints(f"{host}:{ports['verify']}", f"{host}:{ports['telemetry']}", endpoint).to_dict()}
        set_title(f"specsched: draft {spec['worker']} (remote)")
        return child.run(spec, EngineWatch(watch), model=model)
    finally:
        watch.close(linger=0)
        door.close(linger=0)
        end_context(ctx)


def _answer(door: zmq.Socket, endpoint: str, timeout_s: float) -> dict:
    """The engine's next answer on the door: its fields, or Refused."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if door.poll(100):
            try:
                msg = unpack(door.recv_multipart(copy=False))
            except REFUSED:
                continue
            if msg.kind == "refused_worker":
                raise Refused(f"the engine at {endpoint} refused this worker: {msg.fields.get('why')}", 2)
            if msg.kind in ("config", "welcome"):
                return msg.fields
    raise Refused(f"no answer from an engine at {endpoint} within {timeout_s:g} s: is one listening there "
                  "(--listen), and is this its key?", 1)


def _address(endpoint: str) -> str:
    """This host's address on the route to the engine: what the engine's views call this worker."""
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, int(port)))  # a UDP connect sends nothing: it only picks the route
            return s.getsockname()[0]
    except OSError:
        return socket.gethostname()


class EngineWatch:
    """``parent_alive`` for a worker the engine did not fork: the door's connection has not been down
    for ENGINE_GONE_S (a dead engine's host closes it at once; a vanished host stops answering pings)."""

    def __init__(self, monitor: zmq.Socket) -> None:
        self.monitor, self.down_since = monitor, None

    def __call__(self) -> bool:
        while self.monitor.poll(0):
            event = parse_monitor_message(self.monitor.recv_multipart())["event"]
            if event == zmq.EVENT_CONNECTED:
                self.down_since = None
            elif self.down_since is None:
                self.down_since = time.monotonic()
        return self.down_since is None or time.monotonic() - self.down_since < ENGINE_GONE_S


def check_connect(endpoint: str) -> str:
    """--connect as given, or one clear line (ConfigError)."""
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    if not endpoint.startswith("tcp://") or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"--connect takes tcp://HOST:PORT (the engine's --listen address), got {endpoint!r}")
    return endpoint
