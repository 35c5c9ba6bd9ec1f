"""Lottery scheduling (Waldspurger & Weihl 1994; OSTEP ch. 9): each ready draft holds its worker's
tickets (``--tickets``, 100 each unless given); draw a winning ticket uniformly among them.

Over many verifications each worker's share of them approaches its share of the tickets among the
ready ones; over few, chance decides (OSTEP's unfairness metric). The draws come from a generator
seeded with ``SEED``, so the same run makes the same draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Policy, ReadyDraft, by_arrival

SEED = 0


class Lottery(Policy):
    name = "lottery"

    def __init__(self, settings=None) -> None:
        super().__init__(settings)
        self.rng = np.random.default_rng(SEED)

    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft:
        ordered = sorted(ready, key=by_arrival)
        winner = int(self.rng.integers(sum(d.tickets for d in ordered)))
        for d in ordered:  # walk the ticket counter, as OSTEP's Figure 9.1
            winner -= d.tickets
            if winner < 0:
                return d
        raise AssertionError("the winning ticket is always held")
