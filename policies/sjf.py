"""Shortest job first: serve the draft whose sequence is the smallest job - its whole token budget
(tokens verified + tokens remaining) - then by arrival.

OSTEP ch. 7 (Arpaci-Dusseau, *Operating Systems: Three Easy Pieces*): with jobs A = 100, B = 10,
C = 10 arriving together, FIFO's average turnaround is 110 and SJF's 50 - the short jobs no longer
wait behind the long one (the convoy effect). Here a verification is the unit of service, so SJF
decides at every verification but by the job's total size, as a non-preemptive SJF would; SRTF
(srtf.py) uses what is left instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class SJF(Policy):
    name = "sjf"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=lambda d: (d.verified_tokens + d.tokens_remaining, *by_arrival(d)))
