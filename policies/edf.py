"""Earliest deadline first: serve the draft whose job's deadline is nearest; jobs without a deadline
come after every job with one; ties by arrival.

Liu & Layland (1973): on one processor, if any order meets every deadline, EDF does. Deadlines come
from a workload's ``deadline_s`` (``--workload``) or ``Engine.submit(deadline_s=...)``; each job's
record says whether it met its deadline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class EDF(Policy):
    name = "edf"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=lambda d: (math.inf if d.deadline is None else d.deadline, *by_arrival(d)))
