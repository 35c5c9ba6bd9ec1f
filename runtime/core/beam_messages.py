"""The messages of a dsbd run: a beam worker's tree of the forest, and the verifier's next task for it.

One round, per beam slot: the worker sends its ``TreeDraft`` (empty when it holds no beam this round);
when every slot of the sequence has sent, the verifier verifies the forest in one target forward and
answers each slot with a ``BeamTask``: the beam it drafts from next (context, the target's joint
log-probability, how many nodes each of its layers gets), none, or done. Both carry the *epoch* of the
slot's worker (its restarts so far, runtime/engine/supervisor.py): the verifier files only trees of the
slot's current epoch, and a worker skips tasks of another (meant for a dead predecessor). msgpack header
plus raw arrays, as every message (wire.py); the arrays are checked here, since they come from another
process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .wire import Message, pack


@dataclass(slots=True)
class TreeDraft:
    seq: int
    worker: int
    slot: int
    round: int
    tokens: np.ndarray              # int32 [n]: the tree's nodes in read order (layer by layer)
    parents: np.ndarray             # int32 [n]: tree position of each node's parent, -1 = the input beam
    layer_sizes: np.ndarray         # int32 [L]: nodes per layer, summing to n
    q: np.ndarray | None = None     # float32 [R, V]: each layer's q over (nodes above x V), stacked; None greedy
    sent_at: float = 0.0
    draft_s: float = 0.0
    epoch: int = 0                  # its worker's restarts so far

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n or int(np.sum(self.layer_sizes)) != n or np.any(self.layer_sizes < 0):
            raise ValueError(f"tree draft: {n} tokens, {len(self.parents)} parents, layers {self.layer_sizes}")
        if n and (np.any(self.parents >= np.arange(n)) or np.any(self.parents < -1)):
            raise ValueError("tree draft parents must point to earlier nodes (or -1)")
        if self.q is not None and self.q.ndim != 2:
            raise ValueError(f"tree draft q has shape {self.q.shape}, expected [rows, V]")

    @property
    def empty(self) -> bool:
        return len(self.tokens) == 0

    def to_frames(self) -> list:
        arrays = {"tokens": self.tokens.astype(np.int32), "parents": self.parents.astype(np.int32),
                  "layer_sizes": self.layer_sizes.astype(np.int32)}
        if self.q is not None:
            arrays["q"] = self.q.astype(np.float32)
        return pack("beam_draft", {"seq": self.seq, "worker": self.worker, "slot": self.slot, "round": self.round,
                                   "sent_at": self.sent_at, "draft_s": self.draft_s, "epoch": self.epoch}, arrays)

    @classmethod
    def from_message(cls, msg: Message) -> TreeDraft:
        f, a = msg.fields, msg.arrays
        return cls(int(f["seq"]), int(f["worker"]), int(f["slot"]), int(f["round"]), a["tokens"], a["parents"],
                   a["layer_sizes"], a.get("q"), float(f.get("sent_at", 0.0)), float(f.get("draft_s", 0.0)),
                   int(f.get("epoch", 0)))


@dataclass(slots=True)
class BeamTask:
    seq: int
    slot: int
    round: int                       # the round the worker drafts next
    done: bool = False               # the sequence is finished: the worker stops
    context: np.ndarray | None = None  # int32: the beam's tokens (prompt included); None = no beam this round
    logprob: float = 0.0             # the beam's joint log-probability under the target
    counts: np.ndarray | None = None   # int32 [gamma]: nodes each layer of its tree gets
    verify_start: float = 0.0
    verify_end: float = 0.0
    epoch: int = 0                   # the epoch of the slot's worker it is meant for
    probe: int = -1                  # the answer to a live worker's probe after its tree of this round; -1: not

    def to_frames(self) -> list:
        arrays = {}
        if self.context is not None:
            arrays = {"context": self.context.astype(np.int32), "counts": self.counts.astype(np.int32)}
        return pack("beam_task", {"seq": self.seq, "slot": self.slot, "round": self.round, "done": self.done,
                                  "logprob": self.logprob, "verify_start": self.verify_start,
                                  "verify_end": self.verify_end, "epoch": self.epoch, "probe": self.probe}, arrays)

    @classmethod
    def from_message(cls, msg: Message) -> BeamTask:
        f, a = msg.fields, msg.arrays
        return cls(int(f["seq"]), int(f["slot"]), int(f["round"]), bool(f["done"]), a.get("context"),
                   float(f["logprob"]), a.get("counts"), float(f["verify_start"]), float(f["verify_end"]),
                   int(f.get("epoch", 0)), int(f.get("probe", -1)))
