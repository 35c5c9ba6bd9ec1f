"""A beam sequence between two rounds: what a new verifier needs to go on from the next one.

The verifier holds every beam of a beam sequence (``--mode beam``, ``dsbd``), and beams rewrite their past,
so the committed tokens alone cannot restore them. After each round it reports the beams as they stand
with the round's commit - one message, so the engine never holds the one without the other: each beam's
tokens past those every beam shares with the committed ones, their joint log-probabilities, the round and
steps reached, which worker holds each slot and since which round a vacant slot waits for one. The engine
keeps each sequence's last report and, when the verifier dies, announces the job to the new one with it
(runtime/engine/supervisor.py). A round's random draws are keyed by the round (``sampling.stream``'s
"beam" and "allocate"), so the new verifier draws what the dead one would have. The report is small: the
beams' uncommitted tails, a few numbers per slot. It travels as plain msgpack fields (a commit's header,
the job message), checked here, since it comes from another process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .wire import ProtocolError

__all__ = ["BeamState"]


@dataclass(slots=True)
class BeamState:
    round: int                 # the round the sequence waits for next
    steps: int                 # steps taken so far
    base: int                  # committed tokens every beam holds, left out of `tails`
    tails: np.ndarray          # int32 [W, t]: each beam's new tokens past the first `base`
    logprobs: np.ndarray       # float64 [W]: the beams' joint log-probabilities under the target
    slots: np.ndarray          # int32 [S]: dsbd, the worker holding each slot (-1: vacant); empty otherwise
    wanted: np.ndarray         # int32 [S]: the round a vacant slot was asked a worker for in (-1: not asked)
    done: bool = False         # the beams are the sequence's final ones

    def __post_init__(self) -> None:
        if min(self.round, self.steps, self.base) < 0:
            raise ProtocolError(f"beam state: round {self.round}, steps {self.steps}, base {self.base}")
        if self.tails.ndim != 2 or self.logprobs.shape != (len(self.tails),) or not len(self.tails):
            raise ProtocolError(f"beam state: tails {self.tails.shape}, logprobs {self.logprobs.shape}: one "
                                f"row and one log-probability per beam, at least one beam")
        if self.slots.ndim != 1 or self.wanted.shape != self.slots.shape:
            raise ProtocolError(f"beam state: slots {self.slots.shape}, wanted {self.wanted.shape}")
        if self.tails.size and int(self.tails.min()) < 0:
            raise ProtocolError("beam state: a negative token")

    def beams(self, committed: list[int]) -> list[list[int]]:
        """Each beam's new tokens, given the sequence's committed ones."""
        if self.base > len(committed):
            raise ProtocolError(f"beam state shares {self.base} committed tokens; the sequence has {len(committed)}")
        return [committed[:self.base] + tail for tail in self.tails.tolist()]

    def to_dict(self) -> dict:
        return {"round": self.round, "steps": self.steps, "base": self.base, "tails": self.tails.tolist(),
                "logprobs": self.logprobs.tolist(), "slots": self.slots.tolist(), "wanted": self.wanted.tolist(),
                "done": self.done}

    @classmethod
    def from_dict(cls, d: dict) -> BeamState:
        tails = np.asarray(d["tails"], dtype=np.int64)
        if tails.size and not 0 <= int(tails.min()) <= int(tails.max()) <= np.iinfo(np.int32).max:
            raise ProtocolError("beam state: a token out of range")
        return cls(int(d["round"]), int(d["steps"]), int(d["base"]), tails.astype(np.int32),
                   np.asarray(d["logprobs"], dtype=np.float64), np.asarray(d["slots"], dtype=np.int32),
                   np.asarray(d["wanted"], dtype=np.int32), bool(d["done"]))
