"""What the engine tells its children, over the control socket (a ROUTER): stop, assign, resync, a job.

``Orders`` owns the socket's sending side and each worker's last assignment, which a restart resumes
(supervisor.py). A child is reached by the identity it said ``ready`` under; a peer that is not a child
yet (a worker joining from another host) by the one-off identity it knocked with (joining.py).
"""

from __future__ import annotations

import zmq

from ..core.security import Keys
from ..core.wire import pack
from .jobs import JobRun
from .process_table import Child


class Orders:
    def __init__(self, control: zmq.Socket, keys: Keys | None) -> None:
        self.control, self.keys = control, keys
        self.assigned: dict[int, tuple[int, list]] = {}  # worker id -> (job, the entries it was last assigned)

    def send(self, child: Child, kind: str, fields: dict) -> None:
        """To a child that said ready (the ROUTER knows it; ROUTER_MANDATORY makes anything else an error).
        One that has died and is not reaped yet cannot be reached: the next look at the dead handles it."""
        try:
            to = self.keys.routing_id(child.name, child.name) if self.keys else child.name.encode()
            self.control.send_multipart([to, *pack(kind, fields)])
        except zmq.ZMQError:
            pass

    def reply(self, identity: bytes, kind: str, fields: dict) -> None:
        """To a peer knocking at the control socket under `identity` (joining.py)."""
        try:
            self.control.send_multipart([identity, *pack(kind, fields)])
        except Exception:  # noqa: BLE001 - a peer gone before the answer: nothing to tell
            pass

    def assign(self, child: Child, job: JobRun, sequences: list[list], epoch: int = 0) -> None:
        """Tell a worker to draft `sequences` of `job`: entries (sequence id, index in the job, prompt, beam
        slot[, how[, want]]), as serve() in workers/draft_worker.py reads them. Kept: a restart resumes them."""
        self.assigned[child.worker] = (job.id, sequences)
        self.send(child, "assign", {"job": job.id, "config": job.config.to_dict(), "epoch": epoch,
                                    "sequences": sequences})

    def entries(self, job: JobRun, worker: int) -> list:
        """What the worker serves of the job: (sequence id, index in the job, prompt, slot[, how[, want]]) - its
        last assignment (a dsbd worker moves from slot to slot), or the job's first one of it."""
        job_id, entries = self.assigned.get(worker, (None, []))
        return entries if job_id == job.id else [s for w, seqs in job.assignments() if w == worker for s in seqs]
