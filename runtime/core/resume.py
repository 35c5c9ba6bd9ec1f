"""The messages of a restarted draft worker taking a sequence back (runtime/engine/supervisor.py).

The verifier is the authority on what is committed, so a new worker asks it rather than the engine
(whose commits may still be in flight): ``Resume`` names the sequence and the worker's new epoch (how
many times it has been restarted); ``Resumed`` answers with the verified context (prompt and every
committed token), the round the next draft must carry, and whether the sequence is already done.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsched.runtime.core.wire import Message, pack


@dataclass(slots=True)
class Resume:
    seq: int
    worker: int
    epoch: int

    def to_frames(self) -> list:
        return pack("resume", {"seq": self.seq, "worker": self.worker, "epoch": self.epoch})

    @classmethod
    def from_message(cls, msg: Message) -> Resume:
        f = msg.fields
        return cls(int(f["seq"]), int(f["worker"]), int(f["epoch"]))


@dataclass(slots=True)
class Resumed:
    seq: int
    round: int
    done: bool
    context: np.ndarray              # int32: the prompt and every token committed so far
    epoch: int = 0                   # the resume's, echoed

    def to_frames(self) -> list:
        return pack("resumed", {"seq": self.seq, "round": self.round, "done": self.done, "epoch": self.epoch},
                    {"context": self.context.astype(np.int32)})

    @classmethod
    def from_message(cls, msg: Message) -> Resumed:
        f = msg.fields
        return cls(int(f["seq"]), int(f["round"]), bool(f["done"]), msg.arrays["context"], int(f.get("epoch", 0)))
