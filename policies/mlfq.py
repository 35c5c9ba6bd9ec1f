"""Multi-level feedback queue, with OSTEP's rules (ch. 8), verifier time as the CPU:

1. If Priority(A) > Priority(B), A runs (B doesn't).
2. If Priority(A) = Priority(B), A & B run in round-robin (here: in cyclic worker order, as rr.py).
3. When a job enters the system, it is placed at the highest priority (the topmost queue).
4. Once a job uses up its time allotment at a given level (regardless of how many times it has
   given up the CPU), its priority is reduced (i.e., it moves down one queue).
5. After some time period S, move all the jobs in the system to the topmost queue.

A job is a worker serving one job (a pool worker starts at the top again for the next job, rule 3);
its "CPU time" is the verifier time its drafts took (``served``). Levels,
allotments and S are class attributes: subclass to change them (a plug-in ``file.py:MyMLFQ``).
Rule 4's "regardless of how many times" is what stops a worker gaming the scheduler with short drafts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .accounts import owner
from .base import Policy, ReadyDraft, by_arrival


class MLFQ(Policy):
    name = "mlfq"
    levels = 3
    allotments = (0.05, 0.1, 0.2)   # seconds of verifier time a worker may use at each level, top first
    boost_s = 1.0                   # rule 5: every S seconds everyone goes back to the top

    def __init__(self, settings=None, clock=time.monotonic) -> None:
        super().__init__(settings)
        self.clock = clock
        self.level: dict[tuple[int, int], int] = {}     # (job, worker) -> its queue (0 = top)
        self.used: dict[tuple[int, int], float] = {}    # (job, worker) -> verifier time used at its level
        self.last_worker = -1
        self.last_boost = clock()

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        if self.clock() - self.last_boost >= self.boost_s:   # rule 5
            self.level.clear()
            self.used.clear()
            self.last_boost = self.clock()
        top = min(self.level.setdefault(owner(d), 0) for d in ready)  # rule 3: new workers at the top
        queue = [d for d in ready if self.level[owner(d)] == top]      # rule 1
        later = [d for d in queue if d.worker > self.last_worker]      # rule 2: round-robin in the queue
        chosen = min(later or queue, key=lambda d: (d.worker, *by_arrival(d)))
        self.last_worker = chosen.worker
        return chosen

    def served(self, draft: ReadyDraft, seconds: float, committed: int) -> None:
        w = owner(draft)
        self.used[w] = self.used.get(w, 0.0) + seconds
        level = self.level.get(w, 0)
        if self.used[w] >= self.allotments[min(level, len(self.allotments) - 1)] and level < self.levels - 1:
            self.level[w], self.used[w] = level + 1, 0.0                # rule 4
