"""Who may talk to an engine's sockets: a per-run capability on ipc, CurveZMQ on tcp.

On ``--transport ipc`` (the default) the sockets live in a private (0700) run directory, which keeps
other users out but not another process of the same user. So every run makes a random 256-bit secret,
held in the engine's memory. Each child is given its own name's password, HMAC-SHA256(secret, name),
through the zygote's pipe (never a file, never argv or the environment); only the engine and the
verifier, whose sockets are ZeroMQ PLAIN servers, hold the secret, and their gatekeeper (gatekeeper.py)
admits a (name, password) pair only if the password is that name's. ZeroMQ then stamps every message
with the name (the frame property ``User-Id``), so a message is believed only from the process it
names: a process the engine did not start cannot connect at all, and a child cannot speak as another.
PLAIN, not CURVE, because the peers share one host and a private directory: nothing to hide from a
wire, and CURVE's encryption costs ~4 ms per 1 MB draft frame on ipc (a sampled draft's q rows).

On ``--transport tcp`` every socket the engine and its verifier bind is a CURVE server, and every
process of the run - local children and workers on other hosts alike - connects as a CURVE client
holding a worker key. Keys are made per run (held in the engine's memory and handed to its children
through the zygote's pipe), or read from files that ``specsched keys DIR`` writes:

- ``engine.key``: the server's key pair and the worker public keys it admits;
- ``worker.key``: a worker's key pair and the server's public key (what ``specsched worker --key`` reads).

Both are JSON, mode 0600; the keys are Z85 text, as ZeroMQ prints them. A server without a ZAP
handler would admit any client that knows its public key, so each binding process runs a
``Gatekeeper`` (gatekeeper.py) that admits listed worker keys only and counts every refused handshake.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import zmq

from .config import ConfigError

ENGINE_KEY, WORKER_KEY = "engine.key", "worker.key"


@dataclass(frozen=True, slots=True)
class Keys:
    server_public: str
    client_public: str
    client_secret: str
    server_secret: str = ""               # the engine's side only
    admitted: tuple[str, ...] = ()        # client public keys the servers admit
    password: str = ""                    # ipc: what this process says as `user` (PLAIN); CURVE fields empty
    user: str = ""                        # ipc: the name this process speaks under
    secret: str = ""                      # ipc: the run's secret (servers only), every name's password derives from it

    @classmethod
    def generate(cls) -> Keys:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        return cls(server_public.decode(), client_public.decode(), client_secret.decode(), server_secret.decode(),
                   (client_public.decode(),))

    @classmethod
    def for_ipc(cls, user: str = "engine") -> Keys:
        """A run's capability on ipc: a random secret, 256 bits, held by a process that speaks as `user`."""
        return cls("", "", "", secret=secrets.token_hex(32)).as_user(user, keep_secret=True)

    def as_user(self, user: str, *, keep_secret: bool = False) -> Keys:
        """What a process that speaks as `user` holds: its own password, and the secret only if it serves
        (`keep_secret`: the verifier, whose run queue's socket admits every worker)."""
        return replace(self, user=user, password=_password(self.secret, user),
                       secret=self.secret if keep_secret else "")

    def routing_id(self, logical: str, user: str) -> bytes:
        """The ZeroMQ identity that `user`'s socket claims as `logical` (b"w1" to the verifier, b"draft-1" to the
        engine): on ipc the logical one, a dot and 16 hex digits of the hash of `user`'s password, which only
        `user` and the servers (holding the secret) can compute. A ROUTER with ROUTER_HANDOVER hands an
        identity to whoever claims it; so no other process can take this one over."""
        if not self.plain:
            return logical.encode()
        if user != self.user and not self.secret:
            raise ValueError(f"{self.user} cannot name {user}'s socket")
        password = self.password if user == self.user else _password(self.secret, user)
        return f"{logical}.{hashlib.sha256(password.encode()).hexdigest()[:16]}".encode()

    def logical_id(self, routing: bytes, user_of) -> bytes | None:
        """The logical identity a received routing identity stands for (a server's side): None unless its tag
        is that of `user_of(logical)`, the process entitled to it."""
        if not self.plain:
            return routing
        logical = routing.partition(b".")[0]
        user = user_of(logical)
        try:
            expected = self.routing_id(logical.decode(), user.decode()) if user else None
        except UnicodeDecodeError:
            return None
        return logical if expected is not None and hmac.compare_digest(routing, expected) else None

    @property
    def plain(self) -> bool:
        return bool(self.password or self.secret)

    def admits(self, user: bytes, password: bytes) -> bool:
        """A PLAIN client's (name, password): admitted iff the password is the name's."""
        return bool(self.secret) and hmac.compare_digest(password, _password(self.secret, user).encode())

    @property
    def serves(self) -> bool:
        return bool(self.server_secret)

    def for_worker(self) -> Keys:
        """What a worker holds: its own pair and the server's public key, never the server's secret."""
        return replace(self, server_secret="", admitted=())

    def to_dict(self) -> dict:
        """JSON form; the ipc fields only when set, so a key file reads the same to an earlier version."""
        return {k: v for k, v in {**asdict(self), "admitted": list(self.admitted)}.items()
                if v or k not in ("password", "user", "secret")}

    @classmethod
    def from_dict(cls, data: dict) -> Keys:
        keys = cls(**{**data, "admitted": tuple(data.get("admitted", ()))})
        for name, value in keys.to_dict().items():
            if name in ("password", "user", "secret"):
                continue
            for key in (value if isinstance(value, list) else [value]):
                if key and (not isinstance(key, str) or len(key) != 40):
                    raise ValueError(f"{name} is not a 40-character Z85 key")
        return keys

    def write(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_dict(), f, indent=1)
            f.write("\n")


@functools.lru_cache(maxsize=1024)  # asked for on every message a server reads and every verdict it sends
def _password(secret: str, user: str | bytes) -> str:
    """A name's password: HMAC-SHA256 of the name under the run's secret, hex."""
    name = user if isinstance(user, bytes) else user.encode()
    return hmac.new(secret.encode(), name, hashlib.sha256).hexdigest()


def write_keys(directory: Path) -> tuple[Path, Path]:
    """A fresh engine.key and worker.key in `directory` (made 0700 if new); returns their paths."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    keys = Keys.generate()
    engine, worker = directory / ENGINE_KEY, directory / WORKER_KEY
    keys.write(engine)
    keys.for_worker().write(worker)
    return engine, worker


def load_keys(path: str | Path, *, engine: bool) -> Keys:
    """An engine's keys (a directory holding engine.key, or the file) or a worker's (worker.key); one clear
    line (ConfigError) when the file is missing or not a key file."""
    path = Path(path)
    if path.is_dir():
        path = path / (ENGINE_KEY if engine else WORKER_KEY)
    try:
        keys = Keys.from_dict(json.loads(path.read_text()))
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path} is not a specsched key file ({exc}); make one with `specsched keys DIR`") from None
    if engine and not keys.serves:
        raise ConfigError(f"{path} is a worker's key; the engine needs {ENGINE_KEY} (`specsched keys DIR`)")
    if not engine and keys.serves:  # it holds the server's secret, which no worker host should have
        raise ConfigError(f"{path} is the engine's key; a worker needs {WORKER_KEY} (and the engine's stays on "
                          "the engine's host)")
    return keys


def secure_server(sock: zmq.Socket, keys: Keys | None) -> None:
    """Make `sock` a PLAIN (ipc) or CURVE (tcp) server, before it binds; its gatekeeper judges each peer."""
    if keys is not None and keys.plain:
        sock.plain_server = True
    elif keys is not None:
        sock.curve_secretkey = keys.server_secret.encode()
        sock.curve_publickey = keys.server_public.encode()
        sock.curve_server = True


def secure_client(sock: zmq.Socket, keys: Keys | None) -> None:
    """Make `sock` a client of the run's servers (before it connects): its name and password on ipc, its
    CURVE keys on tcp."""
    if keys is not None and keys.plain:
        sock.plain_username = keys.user.encode()
        sock.plain_password = keys.password.encode()
    elif keys is not None:
        sock.curve_secretkey = keys.client_secret.encode()
        sock.curve_publickey = keys.client_public.encode()
        sock.curve_serverkey = keys.server_public.encode()


def speaks_as(keys: Keys | None, frames: list, name: bytes | None) -> bool:
    """The one check that a message comes from the process it speaks for: on ipc, the name its sender was
    admitted under is `name` (None: an identity no process may claim); elsewhere (tcp, no keys) the socket's
    key is all there is, so True."""
    return keys is None or not keys.plain or (name is not None and speaker(frames) == name)


def speaker(frames: list) -> bytes:
    """The name a message's sender was admitted under on ipc (the gatekeeper's ``User-Id``, stamped by ZeroMQ
    on every frame received with copy=False); b"" if none."""
    try:
        return frames[0].get("User-Id").encode()
    except (AttributeError, zmq.ZMQError):
        return b""
