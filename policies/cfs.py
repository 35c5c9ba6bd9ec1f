"""A CFS-like fair scheduler (Linux's Completely Fair Scheduler; OSTEP ch. 9): serve the ready draft
whose worker has the least virtual runtime.

Virtual runtime grows by the verifier time a worker's drafts take, scaled by 1024 / weight; the
weight comes from the priority as Linux derives it from nice: weight = 1024 / 1.25^nice, with nice
= the job's priority + the worker's (--priorities; lower = more urgent). Over time every worker gets
verifier time in proportion to its weight. A worker seen for the first time starts at the smallest
virtual runtime so far (Linux's min_vruntime), so it neither starves the others nor waits for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from specsched.policies.base import Policy, ReadyDraft, by_arrival

NICE_0 = 1024


def weight(nice: int) -> float:
    return NICE_0 / 1.25 ** nice


class CFS(Policy):
    name = "cfs"

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.vruntime: dict[int, float] = {}

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        floor = min(self.vruntime.values(), default=0.0)
        for d in ready:
            self.vruntime.setdefault(d.worker, floor)
        return min(ready, key=lambda d: (self.vruntime[d.worker], d.worker, *by_arrival(d)))

    def served(self, draft: ReadyDraft, seconds: float, committed: int) -> None:
        nice = draft.job_priority + draft.priority
        self.vruntime[draft.worker] = self.vruntime.get(draft.worker, 0.0) + seconds * NICE_0 / weight(nice)
