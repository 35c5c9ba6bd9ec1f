"""Stride scheduling (Waldspurger 1995; OSTEP ch. 9): deterministic proportional share.

Each worker has a stride = ``BIG`` / tickets and a pass value starting at 0; serve the ready draft
whose worker has the lowest pass (ties: lower worker id, then arrival) and advance that pass by its
stride. OSTEP's example - A, B, C with 100, 50 and 250 tickets (strides 100, 200, 40) - serves
A, B, C, C, C, A, C, C, ...: in every pass of 200 units, C twice as often as A and A twice as often
as B. A worker seen for the first time starts at the lowest pass of the active ones (as a new job
does in OSTEP; accounts.py), so a late arrival cannot monopolise the verifier; a worker busy drafting
keeps its pass - in speculative decoding every worker is away between its verifications, and that is
not idleness.
"""

from __future__ import annotations

from collections.abc import Sequence

from .accounts import Accounts
from .base import Policy, ReadyDraft

BIG = 10_000


class Stride(Policy):
    name = "stride"

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.passes = Accounts()

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        chosen = self.passes.lowest(ready)
        self.passes.add(chosen, BIG / chosen.tickets)
        return chosen
