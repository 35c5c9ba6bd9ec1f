"""How the target reads a draft, and what its cache keeps afterwards: one rule for the verifier and for
the serial evaluation loop (runtime/apps/drafts/evaluation/evaluate.py).

The target's cache holds a sequence's committed context minus what it has not read yet (at least the
last committed token). A draft is read after those unread tokens, in the same forward, as a tree:
draft token j attends to the prefix and its own ancestors, at position prefix length + depth. Only
the rows from the last unread token's on are computed (``first_row``): row 0 predicts the draft's
first level, row 1 + j what follows draft token j. After the verdict the cache keeps only the
accepted path, so the prefix is never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel
from ..runtime.core.coupling import Race
from ..runtime.core.draft_q import DraftQ
from ..runtime.core.sampling import SamplingParams
from .acceptance import Outcome, verify_tree


@dataclass(slots=True)
class Layout:
    tokens: list[int]            # unread context, then the draft
    parents: list[int] | None    # absolute cache indices (-1 = none); None = a plain continuation
    unread: int                  # how many of `tokens` are unread context
    base: int                    # cache index of the draft's first token

    @property
    def first_row(self) -> int:
        """The forward's ``first_row``: the last unread token's (the rows before it predict known tokens)."""
        return self.unread - 1


def lay_out(target: LanguageModel, cache: Cache, context: list[int], tokens: np.ndarray,
            parents: np.ndarray) -> Layout:
    unread = target.sync_to(cache, context)
    base = len(cache) + len(unread)
    absolute = [len(cache) + i - 1 for i in range(len(unread))]
    absolute += [base + int(p) if p >= 0 else base - 1 for p in parents]
    return Layout(unread + tokens.tolist(), cache.plain(absolute), len(unread), base)


def settle(target: LanguageModel, cache: Cache, layout: Layout, rows: np.ndarray, tokens: np.ndarray,
           parents: np.ndarray, q: DraftQ | None, params: SamplingParams,
           rng: np.random.Generator, lanes: int = 0, race: Race | None = None) -> Outcome:
    """Accept what the target agrees with (acceptance.py) and keep only the accepted path in the cache.
    The draft's last `lanes` tokens are branch lanes: read in the forward, never candidates, never kept."""
    m = len(tokens) - lanes
    outcome = verify_tree(rows[0], rows[1:1 + m], tokens[:m], parents[:m], q, params, rng, race)
    target.keep(cache, [*range(layout.base), *(layout.base + j for j in outcome.path)])
    return outcome


def lane_predictions(layout: Layout, rows: np.ndarray, n: int, lanes: int) -> np.ndarray | None:
    """The target's argmax after each of a draft's `lanes` branch-lane tokens (its last ones): what the
    branch lanes learn from (workers/branch_lanes.py). None when the draft has none."""
    if not lanes:
        return None
    at = 1 + n - lanes
    return rows[at:at + lanes].argmax(axis=-1).astype(np.int32)
