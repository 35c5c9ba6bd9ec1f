"""Commit first: when drafts wait, verify those that carry candidates before those that only explore.

With Self-Draft (`--drafter branches`), a draft whose caches had nothing for its sequence is branch work
only: its forward feeds the lanes and commits the one token any forward commits. A draft with candidates
may commit several. When the queue is longer than one, serving the candidates first commits tokens
sooner and lets the branch-only drafts wait a turn (their lanes lose nothing by it); alone in the queue
a draft is served at once, whatever its kind. Ties: arrival, as FCFS.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class CommitFirst(Policy):
    name = "commit-first"

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        return min(ready, key=lambda d: (d.kind == "branch", *by_arrival(d)))
