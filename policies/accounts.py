"""Per-worker accounts for the proportional-share policies (stride's pass, CFS's virtual runtime).

An account belongs to a (job, worker) pair: an engine runs many jobs on one policy instance, and a
pool worker serving a new job must not bring back what it was owed in the last one. A newcomer starts
at the lowest account among the active ones (those seen in the last ``WINDOW`` picks) - as a new job
gets the lowest pass in stride scheduling and min_vruntime in CFS - so it neither monopolises the
verifier nor waits for the others to catch up; accounts unseen that long are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import ReadyDraft, by_arrival

WINDOW = 64


def owner(d: ReadyDraft) -> tuple[int, int]:
    return d.job, d.worker


class Accounts:
    def __init__(self) -> None:
        self.value: dict[tuple[int, int], float] = {}
        self.seen: dict[tuple[int, int], int] = {}
        self.picks = 0

    def open(self, ready: Sequence[ReadyDraft]) -> None:
        """Before a pick: forget stale accounts, open one for every newcomer in `ready`."""
        self.picks += 1
        for key in [k for k, at in self.seen.items() if self.picks - at > WINDOW]:
            del self.seen[key], self.value[key]
        floor = min(self.value.values(), default=0.0)
        for d in ready:
            self.value.setdefault(owner(d), floor)
            self.seen[owner(d)] = self.picks

    def lowest(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        """Open the newcomers' accounts, then the ready draft whose account is lowest (ties: lower worker
        id, then arrival)."""
        self.open(ready)
        return min(ready, key=lambda d: (self.value[owner(d)], d.worker, *by_arrival(d)))

    def add(self, d: ReadyDraft, amount: float) -> None:
        self.value[owner(d)] = self.value.get(owner(d), 0.0) + amount
