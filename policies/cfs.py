"""A CFS-like fair scheduler (Linux's Completely Fair Scheduler; OSTEP ch. 9): serve the ready draft
whose worker has the least virtual runtime.

Virtual runtime grows by the verifier time a worker's drafts take, scaled by 1024 / weight; the
weight comes from the priority as Linux derives it from nice: weight = 1024 / 1.25^nice, with nice
= the job's priority + the worker's (--priorities; lower = more urgent). Over time every worker gets
verifier time in proportion to its weight. A worker seen for the first time starts at the smallest
virtual runtime of the active ones (Linux's min_vruntime; accounts.py), so it neither starves the
others nor waits for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from .accounts import Accounts
from .base import Policy, ReadyDraft

NICE_0 = 1024


def weight(nice: int) -> float:
    return NICE_0 / 1.25 ** nice


class CFS(Policy):
    name = "cfs"

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.vruntime = Accounts()

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return self.vruntime.lowest(ready)

    def served(self, draft: ReadyDraft, seconds: float, committed: int) -> None:
        self.vruntime.add(draft, seconds * NICE_0 / weight(draft.job_priority + draft.priority))
