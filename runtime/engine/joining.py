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
to the supervisor, which restarts its work on a local process from the verified prefix
(liveness.py, supervisor.py).
"""

from __future__ import annotations

from ..backends.backend import get_backend, same_vocabulary
from ..backends.hf_pair import pinned_draft
from ..core.config import ConfigError, RunConfig
from ..core.gatekeeper import Gatekeeper
from ..core.transport import Endpoints, port_of
from ..core.wire import unpack
from .jobs import LiveJobs
from .orders import Orders
from .process_table import Child, ProcessTable


class Joining:
    """Answers peers at the control socket that are not children yet, and counts the peers refused.

    Owns the target's ``vocabulary`` (read on the first join), ``refused_joins`` (workers refused at hello:
    vocabulary, room), ``refused_handshakes`` (peers without the run's key, as the engine's `gatekeeper`
    and the verifier's reports count them) and the verifier's own count of those, by its pid."""

    def __init__(self, config: RunConfig, table: ProcessTable, live: LiveJobs, orders: Orders,
                 endpoints: Endpoints, gatekeeper: Gatekeeper | None, *, max_workers: int) -> None:
        self.config, self.table, self.live, self.orders = config, table, live, orders
        self.endpoints, self.gatekeeper, self.max_workers = endpoints, gatekeeper, max_workers
        self.vocabulary: dict | None = None
        self.refused_joins = 0
        self.refused_handshakes = 0
        self.verifier_refused: dict[int, int] = {}

    def door(self, frames: list) -> None:
        """A message on the control socket from someone not (yet) a child: a worker joining, or junk, which
        raises one of wire.REFUSED (the caller counts it)."""
        identity = frames[0]
        msg = unpack(frames[1:])
        if msg.kind == "join":
            self._answer_join(identity)
        elif msg.kind == "hello":
            self._answer_hello(identity, msg.fields)
        else:
            raise ValueError(f"{msg.kind} from no child of this engine")

    def _answer_join(self, identity: bytes) -> None:
        if not self.config.network.listen:
            self.orders.reply(identity, "refused_worker", {"why": "this engine takes no workers from other hosts "
                                                           "(start it with --listen HOST:PORT)"})
            return
        try:
            vocabulary = self._target_vocabulary()
        except ConfigError as exc:
            self.orders.reply(identity, "refused_worker", {"why": str(exc)})
            return
        # the draft pinned to the one the engine's own rule chose (hf_pair.default_reads_features): a worker's host
        # would choose by its own device
        config = {**self.config.to_dict(), "draft": self.config.draft or pinned_draft(self.config)}
        self.orders.reply(identity, "config", {"config": config, "vocabulary": vocabulary})

    def _target_vocabulary(self) -> dict:
        if self.vocabulary is None:   # read on the first join: an engine without remote workers never pays
            self.vocabulary = get_backend(self.config).vocabulary("target")
        return self.vocabulary

    def _answer_hello(self, identity: bytes, fields: dict) -> None:
        host = str(fields.get("host", "?"))[:64]
        why = "this engine takes no workers from other hosts" if not self.config.network.listen else \
            same_vocabulary(self._target_vocabulary(), dict(fields["vocabulary"]))
        if why is None and len(self.table.workers()) >= self.max_workers:
            why = f"this engine already runs {self.max_workers} draft workers (max_workers)"
        if why is not None:
            self.refused_joins += 1
            self.orders.reply(identity, "refused_worker", {"why": why})
            return
        child = self.table.adopt(host)
        e = self.endpoints
        ports = {"verify": port_of(e.verify), "telemetry": port_of(e.telemetry)}
        self.orders.reply(identity, "welcome", {"worker": child.worker, "pid": child.proc.pid, "ports": ports})

    def left(self, child: Child, code: int) -> None:
        """A remote worker said it leaves (``bye``), or its last words (``error``): it is dead to the engine."""
        if child.host is not None and child.proc.poll() is None:
            child.proc.exited(code)

    def verifier_refusals(self, pid: int, count: int) -> None:
        """The verifier's gatekeeper has refused `count` handshakes so far (its ``refused`` report)."""
        self.verifier_refused[pid] = count

    def count_refused(self) -> None:
        """Refused handshakes since the last look (the engine's gatekeeper, and the verifier's reports), added
        to the engine's count and to every running job's."""
        total = (self.gatekeeper.refused if self.gatekeeper is not None else 0) + sum(self.verifier_refused.values())
        delta, self.refused_handshakes = total - self.refused_handshakes, total
        if delta > 0:
            for job in self.live.running():
                job.collected.refused_handshakes += delta
