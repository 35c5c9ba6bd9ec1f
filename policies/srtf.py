"""Shortest remaining time first (STCF in OSTEP ch. 7): serve the draft whose sequence has the fewest
tokens left to generate (``tokens_remaining``), then by arrival.

A job that arrives with little to do overtakes one that is far from done, at its next verification
(the preemption point here): OSTEP's example, A = 100 at t = 0 and B, C = 10 at t = 10, brings the
average turnaround from 103.33 (SJF) to 50. Long jobs can starve while short ones keep arriving.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class SRTF(Policy):
    name = "srtf"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=lambda d: (d.tokens_remaining, *by_arrival(d)))
