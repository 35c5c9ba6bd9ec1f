"""Static priorities: the job's priority first (a workload's "priority"), then the worker's (--priorities);
lower value = more urgent; ties by arrival, then counter.

Like OS priority scheduling it can starve: a low-priority worker waits while urgent ones keep
arriving. The run's metrics show that waiting time.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class Priority(Policy):
    name = "priority"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=lambda d: (d.job_priority, d.priority, *by_arrival(d)))
