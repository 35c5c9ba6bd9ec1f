"""Workers on other hosts: how one joins a running engine, and how the engine counts refused peers.

``specsched worker --connect tcp://HOST:PORT --key worker.key`` (runtime/engine/remote.py) knocks at the
engine's control socket - the one ``--listen HOST:PORT`` binds - under a one-off identity:

    worker -> join                      engine -> config  {the engine's RunConfig, its target's vocabulary}
    (the worker loads its own draft)
    worker -> hello {vocabulary, host}  engine -> welcome {worker id, wire pid, ports} | refused {why}

A draft whose vocabulary differs from the target's is refused here, before it ever drafts. A welcomed
worker is a child of the process table like any other (``ProcessTable.adopt``: no local process,
named by a pid above any local one), connects its sockets as the worker id it was given, says
``ready`` and is given jobs, remote workers first (their cores are extra). The engine measures its
liveness by heartbeats in every state; one that falls silent, or says it leaves (``bye``), is dead
to the supervisor, which restarts its work on a local process from the verified prefix. A mixin of
the Dispatcher.
"""

from __future__ import annotations

from ..backends.backend import get_backend, same_vocabulary
from ..core.config import ConfigError
from ..core.transport import port_of
from ..core.wire import REFUSED, pack, unpack
from .jobs import Phase
from .process_table import State


class Joining:
    def _door(self, frames: list) -> None:
        """A message on the control socket from someone not (yet) a child: a worker joining, or junk."""
        identity = frames[0]
        try:
            msg = unpack(frames[1:])
            if msg.kind == "join":
                self._answer_join(identity)
            elif msg.kind == "hello":
                self._answer_hello(identity, msg.fields)
            else:
                raise ValueError(f"{msg.kind} from no child of this engine")
        except REFUSED:
            self._refuse_telemetry()

    def _reply(self, identity: bytes, kind: str, fields: dict) -> None:
        try:
            self.control.send_multipart([identity, *pack(kind, fields)])
        except Exception:  # noqa: BLE001 - a peer gone before the answer: nothing to tell
            pass

    def _answer_join(self, identity: bytes) -> None:
        if not self.config.listen:
            self._reply(identity, "refused_worker", {"why": "this engine takes no workers from other hosts "
                                                     "(start it with --listen HOST:PORT)"})
            return
        try:
            vocabulary = self._target_vocabulary()
        except ConfigError as exc:
            self._reply(identity, "refused_worker", {"why": str(exc)})
            return
        self._reply(identity, "config", {"config": self.config.to_dict(), "vocabulary": vocabulary})

    def _target_vocabulary(self) -> dict:
        if self.vocabulary is None:   # read on the first join: an engine without remote workers never pays
            self.vocabulary = get_backend(self.config).vocabulary("target")
        return self.vocabulary

    def _answer_hello(self, identity: bytes, fields: dict) -> None:
        host = str(fields.get("host", "?"))[:64]
        why = "this engine takes no workers from other hosts" if not self.config.listen else \
            same_vocabulary(self._target_vocabulary(), dict(fields["vocabulary"]))
        if why is None and len(self.table.workers()) >= self.max_workers:
            why = f"this engine already runs {self.max_workers} draft workers (max_workers)"
        if why is not None:
            self.refused_joins += 1
            self._reply(identity, "refused_worker", {"why": why})
            return
        child = self.table.adopt(host)
        e = self.endpoints
        self._reply(identity, "welcome", {"worker": child.worker, "pid": child.proc.pid,
                                          "ports": {"verify": port_of(e.verify), "telemetry": port_of(e.telemetry)}})

    def _remote_left(self, child, code: int) -> None:
        """A remote worker said it leaves (``bye``), or its last words (``error``): it is dead to the engine."""
        if child.host is not None and child.proc.poll() is None:
            child.proc.exited(code)

    def _check_remote_heartbeats(self, now: float, stalled: bool) -> None:
        """A remote worker is judged by its heartbeats in every state: nothing else would tell a parked
        one's host had gone."""
        limit = self.config.heartbeat_timeout_s
        for c in self.table.workers():
            if c.host is None or c.state is State.RETIRING:
                continue
            if stalled:
                c.beat = now
            elif c.hung is None and now - c.beat > limit:
                c.hung = f"at {c.host} sent no heartbeat for {limit:g} s, so the engine gave up on it"
                self.table.kill(c)

    def _count_refused(self) -> None:
        """Refused handshakes since the last look (the engine's gatekeeper, and the verifier's reports), added
        to the engine's count and to every running job's."""
        total = (self.gatekeeper.refused if self.gatekeeper is not None else 0) + sum(self.verifier_refused.values())
        delta, self.refused_handshakes = total - self.refused_handshakes, total
        if delta > 0:
            for job in self.jobs:
                if job.phase is Phase.RUNNING:
                    job.collected.refused_handshakes += delta
