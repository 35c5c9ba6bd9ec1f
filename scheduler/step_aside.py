"""Speculation that steps aside: a sequence whose drafts do not pay is decoded by the target alone.

Per sequence the verifier keeps running means (EWMA, weight `BETA` on the newest round) of what one
round of speculation yields and costs: E tokens committed (accepted + 1), K draft tokens, and D the
seconds its worker spent drafting (the draft says). With the measured forward cost
t(tokens, rows) = a + b·tokens + c·(rows − 1) (runtime/core/costs.py):

    a round of drafting costs    a + b·(K + 1) + D   and commits E tokens;
    decoding alone costs         a + b               per token.

So drafting pays while  E·(a + b) ≥ a + b·(K + 1) + D.  That is the single-sequence view; beside other
rows a lone token costs only b + c more, which favours stepping aside even more, so the rule leans
towards speculation. When drafting does not pay, the verifier keeps the verdict and decodes the
sequence itself for R rounds as a *rider*: one more row, of one token, in every forward it runs
(batched with whatever the policy picked, or alone when nothing is queued). Then it answers with
every token committed meanwhile and the worker drafts again - a probe that refreshes E. R doubles
each time the same sequence steps aside again (2, 4, ... `MAX_ROUNDS`) and starts over once drafting
pays. Nothing here touches acceptance: a rider's token is the target's own (argmax, or a draw from
p), so greedy output is unchanged and sampled output still follows the target exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime.core.costs import CostCurve
from ..runtime.core.messages import Verdict

BETA = 0.3          # weight of the newest round in the running means
WARMUP = 2          # rounds drafted before the first decision (the means need something to mean)
MAX_ROUNDS = 32     # the longest stretch a sequence stays aside before it probes again


@dataclass(slots=True)
class Yield:
    tokens: float = 0.0    # E: committed per round
    drafted: float = 0.0   # K: draft tokens per round
    draft_s: float = 0.0   # D: worker seconds per round
    rounds: int = 0
    streak: int = 0        # times in a row this sequence stepped aside

    def add(self, committed: int, drafted: int, draft_s: float) -> None:
        w = 1.0 if self.rounds == 0 else BETA
        self.tokens += w * (committed - self.tokens)
        self.drafted += w * (drafted - self.drafted)
        self.draft_s += w * (draft_s - self.draft_s)
        self.rounds += 1


def drafting_pays(y: Yield, curve: CostCurve) -> bool:
    return y.tokens * (curve.a + curve.b) >= curve.a + curve.b * (y.drafted + 1) + y.draft_s


@dataclass(slots=True)
class Rider:
    """A sequence decoded by the target alone, holding the verdict its worker waits for."""
    seq: int
    reply_to: bytes
    worker: int
    verdict: Verdict
    left: int                       # rounds still to decode before answering
    kept: list[int] = field(default_factory=list)

    def release(self, done: bool) -> Verdict:
        v = self.verdict
        v.tokens = np.concatenate([v.tokens, np.asarray(self.kept, np.int32)])
        v.done, v.aside = done, len(self.kept)
        return v


class StepAside:
    def __init__(self) -> None:
        self.yields: dict[int, Yield] = {}

    def rounds_aside(self, seq: int, committed: int, drafted: int, draft_s: float,
                     curve: CostCurve | None) -> int:
        """After a verified draft: how many rounds the sequence should ride instead (0: keep drafting)."""
        y = self.yields.setdefault(seq, Yield())
        y.add(committed, drafted, draft_s)
        if curve is None or y.rounds < WARMUP or drafting_pays(y, curve):
            y.streak = 0
            return 0
        y.streak += 1
        return min(2 ** y.streak, MAX_ROUNDS)

    def forget(self, seq: int) -> None:
        self.yields.pop(seq, None)
