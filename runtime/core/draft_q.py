"""The q of a sampled draft: for each candidate token, the distribution it was drawn from.

A candidate proposed with certainty - prompt lookup (workers/lookup.py), Self-Draft's n-gram caches
(workers/branch_drafter.py) - was drawn from q = δ_x, x its own token. Its row is a *point mass*: it is
marked in `point` and stored nowhere, in memory or on the wire (one byte where a dense row is 4·V bytes,
192 KiB at V = 49,152). Every other candidate's q is a row of `dense`, in candidate order.

On the wire (runtime/core/messages.py): array ``q`` is `dense`, float32 [d, V]; array ``point`` is the
mask, bool [n], sent only when some row is a point mass (absent: every row is dense). d = n − #points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .wire import ProtocolError


@dataclass(frozen=True, slots=True)
class DraftQ:
    dense: np.ndarray   # float32 [d, V]: the q of each candidate that is not a point mass, in candidate order
    point: np.ndarray   # bool [n]: candidate i was drawn from δ at its own token

    def __post_init__(self) -> None:
        if self.dense.ndim != 2 or self.dense.dtype != np.float32:
            raise ValueError(f"draft q is {self.dense.dtype} {self.dense.shape}, expected float32 [rows, V]")
        if self.point.ndim != 1 or self.point.dtype != np.bool_:
            raise ValueError(f"draft point masses are {self.point.dtype} {self.point.shape}, expected bool [n]")
        if self.point.view(np.uint8).max(initial=0) > 1:  # a peer's bool byte that is neither 0 nor 1
            raise ValueError("draft point masses hold a byte that is not a bool")
        if len(self.dense) != len(self.point) - np.count_nonzero(self.point):
            raise ValueError(f"draft q has {len(self.dense)} rows for {len(self.point)} candidates of which "
                             f"{np.count_nonzero(self.point)} are point masses")

    @classmethod
    def of(cls, rows: Sequence[np.ndarray | None], vocab: int) -> DraftQ:
        """One entry per candidate: the row it was drawn from, or None where it was drawn from δ at itself."""
        dense = [r for r in rows if r is not None]
        return cls(np.stack(dense).astype(np.float32, copy=False) if dense else np.zeros((0, vocab), np.float32),
                   np.array([r is None for r in rows], dtype=bool))

    @classmethod
    def rows(cls, q: np.ndarray) -> DraftQ:
        """Every candidate drawn from its own row of q [n, V]."""
        return cls(np.asarray(q, np.float32), np.zeros(len(q), dtype=bool))

    def __len__(self) -> int:
        return len(self.point)

    @property
    def vocab(self) -> int:
        return self.dense.shape[1]

    def row(self, i: int) -> np.ndarray | None:
        """Candidate i's q: its dense row, or None for δ at its own token."""
        if self.point[i]:
            return None
        return self.dense[i - np.count_nonzero(self.point[:i])]

    def then_points(self, n: int) -> DraftQ:
        """These candidates, then `n` more drawn from δ at themselves (cache candidates after a model's tree)."""
        return DraftQ(self.dense, np.concatenate([self.point, np.ones(n, dtype=bool)]))

    def written_out(self, tokens: np.ndarray) -> np.ndarray:
        """The V-wide rows this stands for, [n, V], each point mass as δ at its token: what it saves sending."""
        q = np.zeros((len(self), self.vocab), np.float32)
        q[~self.point] = self.dense
        q[np.flatnonzero(self.point), tokens[self.point]] = 1.0
        return q

    def arrays(self) -> dict[str, np.ndarray]:
        """Its wire arrays (module docstring)."""
        return {"q": self.dense, **({"point": self.point} if self.point.any() else {})}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> DraftQ | None:
        """Read back from a message's arrays; None when it carries no q (a greedy draft)."""
        q, point = arrays.get("q"), arrays.get("point")
        if q is None:
            if point is not None:
                raise ProtocolError("draft has point masses but no q")
            return None
        q = q.astype(np.float32, copy=False)
        return cls(q, point) if point is not None else cls.rows(q)
