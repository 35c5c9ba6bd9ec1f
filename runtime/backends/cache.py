"""A model's cache as a token tree: which tokens it has read, each one's parent and position.

Backends subclass ``Cache`` to hold their key/value tensors; the bookkeeping here is what every backend,
the verifier and the drafters share: a tree's attention mask, collapsing a verified tree to its path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Cache:
    """What a model has already read. Backends subclass it to hold their key/value tensors.

    Entries form a tree: ``parents[i]`` is the cache index entry i attends to as its predecessor
    (``i - 1`` along a plain sequence) and ``positions[i]`` its position id (its depth). A draft or
    a verification appends a token tree; ``keep`` collapses it back to one accepted path.
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self._branched = False  # some entry's parent is not the entry before it
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def linear(self) -> bool:
        return not self._branched

    def append(self, tokens: Sequence[int], parents: Sequence[int] | None) -> list[int]:
        """Record new entries (parents absolute, None = a plain continuation); returns the parents."""
        base = len(self.tokens)
        if parents is None:
            parents = [base + i - 1 for i in range(len(tokens))]
        for i, (t, p) in enumerate(zip(tokens, parents)):
            if not -1 <= p < base + i:  # a parent is already cached or earlier in this call
                raise ValueError(f"token {i} has parent {p}, outside -1..{base + i - 1}")
            self.tokens.append(int(t))
            self.parents.append(int(p))
            self._branched |= p != base + i - 1
            self.positions.append(self.positions[p] + 1 if p >= 0 else 0)
        return [int(p) for p in parents]

    def plain(self, parents: Sequence[int] | None) -> Sequence[int] | None:
        """``parents`` (absolute) for tokens about to be appended, or None where they only continue this
        plain sequence - a chain said as a tree, which a backend reads with a causal forward, no tree mask."""
        end = len(self) - 1
        if parents is not None and self.linear and list(parents) == [*range(end, end + len(parents))]:
            return None
        return parents

    def ancestors(self, i: int, limit: int | None = None) -> list[int]:
        """Cache indices entry i can see (itself and its ancestors, root first), at most ``limit``."""
        chain = []
        while i >= 0 and (limit is None or len(chain) < limit):
            chain.append(i)
            i = self.parents[i]
        return chain[::-1]

    def visibility(self, start: int) -> np.ndarray:
        """Tree attention mask of entries ``start..``: [n, len] bool, True where a row may attend."""
        allowed = np.zeros((len(self) - start, len(self)), dtype=bool)
        for row, i in enumerate(range(start, len(self))):
            allowed[row, self.ancestors(i)] = True
        return allowed

    def select(self, indices: Sequence[int]) -> None:
        """Keep only ``indices`` (a root-first path), which become a plain sequence."""
        self.tokens = [self.tokens[i] for i in indices]
        self.parents = list(range(-1, len(indices) - 1))
        self._branched = False
        self.positions = list(range(len(indices)))
