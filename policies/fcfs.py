"""First come, first served: the SEED paper's rounds-scheduled deque (§4.2, Algorithm 2)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class FCFS(Policy):
    name = "fcfs"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=by_arrival)
