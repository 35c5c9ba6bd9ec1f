"""The messages of a restarted draft worker taking a sequence back (runtime/engine/supervisor.py).

The verifier is the authority on what is committed, so a new worker asks it rather than the engine
(whose commits may still be in flight): ``Resume`` names the sequence and the worker's new epoch (how
many times it has been restarted); ``Resumed`` answers with the verified context (prompt and every
committed token), the round the next draft must carry, and whether the sequence is already done.

The same pair, marked ``probe``, is a live worker's question after waiting a verdict timeout: where does
my sequence stand? A probe changes nothing (same epoch, the queue untouched); its answer says whether the
draft it names by round is still ``queued`` (in the run queue or riding aside), so the worker waits on,
sends the draft again (it was lost on the way), or drafts on from the context (its verdict was lost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .wire import Message, pack


@dataclass(slots=True)
class Resume:
    seq: int
    worker: int
    epoch: int
    probe: int = -1                  # a live worker's probe: the round whose verdict it waits for; -1 = a restart

    def to_frames(self) -> list:
        return pack("resume", {"seq": self.seq, "worker": self.worker, "epoch": self.epoch, "probe": self.probe})

    @classmethod
    def from_message(cls, msg: Message) -> Resume:
        f = msg.fields
        return cls(int(f["seq"]), int(f["worker"]), int(f["epoch"]), int(f.get("probe", -1)))


@dataclass(slots=True)
class Resumed:
    seq: int
    round: int
    done: bool
    context: np.ndarray              # int32: the prompt and every token committed so far
    epoch: int = 0                   # the resume's, echoed
    probe: int = -1                  # the probe's round, echoed (-1: the answer to a restart)
    queued: bool = False             # a probe's answer: the sequence's draft waits in the verifier

    def to_frames(self) -> list:
        return pack("resumed", {"seq": self.seq, "round": self.round, "done": self.done, "epoch": self.epoch,
                                "probe": self.probe, "queued": self.queued},
                    {"context": self.context.astype(np.int32)})

    @classmethod
    def from_message(cls, msg: Message) -> Resumed:
        f = msg.fields
        return cls(int(f["seq"]), int(f["round"]), bool(f["done"]), msg.arrays["context"], int(f.get("epoch", 0)),
                   int(f.get("probe", -1)), bool(f.get("queued", False)))
