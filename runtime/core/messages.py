"""The two messages of the draft -> run queue -> verify -> verdict loop, and their wire form.

A draft is a token *tree* given by parent indices; a chain of k tokens is the tree of width one
(parents ``[-1, 0, 1, ...]``, where -1 means "child of the last committed token"). A verdict names
the accepted path through that tree, so tree drafts, beams and branches fit the same two messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .draft_q import DraftQ
from .wire import Message, ProtocolError, pack


@dataclass(slots=True)
class Draft:
    seq: int
    worker: int
    round: int
    tokens: np.ndarray              # int32 [n] draft tokens
    parents: np.ndarray             # int32 [n] parent index of each token, -1 = the committed prefix
    q: DraftQ | None = None         # what each candidate was drawn from (draft_q.py); None when greedy
    prompt: np.ndarray | None = None  # int32, sent with a sequence's first draft only
    sent_at: float = 0.0
    conf: np.ndarray | None = None  # float32 [n]: the draft's probability of each token (calibration, PCT)
    draft_s: float = 0.0            # seconds the worker spent drafting it
    epoch: int = 0                  # restarts of the worker before it drafted this (supervisor.py)
    lanes: int = 0                  # the last `lanes` tokens are branch lanes: read, not verified
    held: int = -1                  # feature rows of the verified prefix the drafter holds; -1: it reads none

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n:
            raise ValueError(f"draft has {n} tokens but {len(self.parents)} parent indices")
        if np.any(self.parents >= np.arange(n)) or np.any(self.parents < -1):
            raise ValueError("draft parents must point to earlier tokens (or -1)")
        if not 0 <= self.lanes <= n:
            raise ValueError(f"draft has {self.lanes} lane tokens among {n} tokens")
        m = self.candidates
        if np.any((self.parents[m:] >= 0) & (self.parents[m:] < m)):
            raise ValueError("a branch lane must hang on the committed prefix or on its own tokens, not on a candidate")
        if self.q is not None and len(self.q) != m:
            raise ValueError(f"draft q is given for {len(self.q)} tokens, expected one for each of {m} candidates")
        if self.conf is not None and self.conf.shape != (m,):
            raise ValueError(f"draft confidences have shape {self.conf.shape}, expected [{m}]")

    @property
    def candidates(self) -> int:
        """Tokens to verify: the draft minus its branch lanes."""
        return len(self.tokens) - self.lanes

    @classmethod
    def chain(cls, seq: int, worker: int, round: int, tokens: list[int], **kw) -> Draft:
        return cls(seq, worker, round, np.asarray(tokens, dtype=np.int32),
                   np.arange(-1, len(tokens) - 1, dtype=np.int32), **kw)

    def to_frames(self) -> list:
        arrays = {"tokens": self.tokens.astype(np.int32), "parents": self.parents.astype(np.int32)}
        if self.q is not None:
            arrays.update(self.q.arrays())
        if self.prompt is not None:
            arrays["prompt"] = self.prompt.astype(np.int32)
        if self.conf is not None:
            arrays["conf"] = self.conf.astype(np.float32)
        return pack("draft", {"seq": self.seq, "worker": self.worker, "round": self.round,
                              "sent_at": self.sent_at, "draft_s": self.draft_s, "epoch": self.epoch,
                              "lanes": self.lanes, "held": self.held}, arrays)

    @classmethod
    def from_message(cls, msg: Message) -> Draft:
        f, a = msg.fields, msg.arrays
        return cls(int(f["seq"]), int(f["worker"]), int(f["round"]), a["tokens"], a["parents"], DraftQ.from_arrays(a),
                   a.get("prompt"), float(f.get("sent_at", 0.0)), a.get("conf"), float(f.get("draft_s", 0.0)),
                   int(f.get("epoch", 0)), _count(f.get("lanes", 0)), _held(f.get("held", -1)))


@dataclass(slots=True)
class Verdict:
    seq: int
    round: int
    accepted: int                # how many draft tokens were accepted
    tokens: np.ndarray           # int32: tokens this verdict commits (accepted path + correction/bonus)
    path: np.ndarray             # int32: indices (into the draft) of the accepted tokens, root first
    done: bool = False           # the sequence reached EOS or its token limit
    verify_start: float = 0.0
    verify_end: float = 0.0
    admitted: float = 0.0        # when the verifier took the draft into its run queue (0: not known)
    cost: list | None = None     # the verifier's fitted forward cost (CostCurve.to_list), if any yet
    queue: int = 0               # drafts left waiting in the run queue when this one was verified
    aside: int = 0               # target-only rounds the verifier decoded this sequence alone before answering
    epoch: int = 0               # the draft's epoch, echoed: a worker ignores answers meant for a dead predecessor
    predictions: np.ndarray | None = None  # int32: the target's argmax after each branch-lane token of the draft
    # float16 [r, d]: the target's features of prefix positions features_from.. (row i: its last hidden state
    # after reading the sequence up to position features_from + i), for a draft that reads them (Draft.held)
    features: np.ndarray | None = None
    features_from: int = 0

    def __post_init__(self) -> None:
        if self.features is not None and (self.features.ndim != 2 or self.features_from < 0):
            raise ValueError("verdict features must be [rows, width], from a position >= 0")

    def to_frames(self) -> list:
        return pack("verdict", {"seq": self.seq, "round": self.round, "accepted": self.accepted,
                                "done": self.done, "verify_start": self.verify_start,
                                "verify_end": self.verify_end, "admitted": self.admitted, "cost": self.cost,
                                "queue": self.queue, "aside": self.aside, "epoch": self.epoch,
                                "features_from": self.features_from},
                    {"tokens": self.tokens.astype(np.int32), "path": self.path.astype(np.int32),
                     **({"predictions": self.predictions.astype(np.int32)} if self.predictions is not None else {}),
                     **({"features": self.features.astype(np.float16)} if self.features is not None else {})})

    @classmethod
    def from_message(cls, msg: Message) -> Verdict:
        f, a = msg.fields, msg.arrays
        return cls(int(f["seq"]), int(f["round"]), int(f["accepted"]), a["tokens"], a["path"],
                   bool(f["done"]), float(f["verify_start"]), float(f["verify_end"]), float(f.get("admitted", 0.0)),
                   f.get("cost"),
                   int(f.get("queue", 0)), int(f.get("aside", 0)), int(f.get("epoch", 0)), a.get("predictions"),
                   a.get("features"), _count(f.get("features_from", 0)))


def _count(value) -> int:
    """A count from a header: an int, never a float, a string or a bool that int() would accept."""
    if type(value) is not int:
        raise ProtocolError(f"expected a whole number, got {value!r}")
    return value


def _held(value) -> int:
    """Draft.held from a header: a whole number, -1 or more."""
    if type(value) is not int or value < -1:
        raise ProtocolError(f"expected a whole number >= -1, got {value!r}")
    return value
