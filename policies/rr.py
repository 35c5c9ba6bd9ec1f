"""Round-robin over workers: serve the next worker (in cyclic id order) that has a ready draft.

Unlike FCFS, the order does not depend on who finished drafting first: a fast worker cannot be
served twice while a slower one waits with a ready draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class RoundRobin(Policy):
    name = "rr"

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.last_worker = -1

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        # Cyclic id order without knowing n: the lowest id after the last one served, else wrap.
        later = [d for d in ready if d.worker > self.last_worker]
        chosen = min(later or ready, key=lambda d: (d.worker, *by_arrival(d)))
        self.last_worker = chosen.worker
        return chosen
