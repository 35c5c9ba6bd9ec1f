"""The q of a sampled draft: for each candidate token, the distribution it was drawn from.

A candidate proposed with certainty - prompt lookup (workers/lookup.py), Self-Draft's n-gram caches
(workers/branch_drafter.py) - was drawn from q = δ_x, x its own token. Its row is a *point mass*: it is
marked in `point` and stored nowhere, in memory or on the wire (one byte where a dense row is 4·V bytes,
192 KiB at V = 49,152). Every other candidate's q is a row of `dense`, in candidate order.

A draft whose distributions live on a fixed set of ids - a feature draft's restricted vocabulary, 4,096 of
49,152 - sends its rows over that *support* alone: `dense` is [d, S] and `support` the S ids, increasing, its
columns stand for; every other id has q = 0. Written out V wide (`row`) it is the same distribution.

On the wire (runtime/core/messages.py): array ``q`` is `dense`, float32 [d, V] (or [d, S]); array ``point``
is the mask, bool [n], sent only when some row is a point mass (absent: every row is dense); array
``support``, int32 [S], only when the rows are restricted. d = n − #points.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .wire import ProtocolError


@dataclass(frozen=True, slots=True)
class DraftQ:
    dense: np.ndarray   # float32 [d, V] (or [d, S]): the q of each candidate not a point mass, in candidate order
    point: np.ndarray   # bool [n]: candidate i was drawn from δ at its own token
    support: np.ndarray | None = None  # int32 [S], increasing: the ids of dense's columns; None: every id

    def __post_init__(self) -> None:
        if self.dense.ndim != 2 or self.dense.dtype != np.float32:
            raise ValueError(f"draft q is {self.dense.dtype} {self.dense.shape}, expected float32 [rows, V]")
        if self.support is not None:
            ids = self.support
            if ids.ndim != 1 or ids.dtype != np.int32 or len(ids) != self.dense.shape[1]:
                raise ValueError(f"draft q's support is {ids.dtype} {ids.shape}, expected int32 "
                                 f"[{self.dense.shape[1]}]: an id per column")
            if len(ids) and (ids[0] < 0 or np.any(ids[1:] <= ids[:-1])):
                raise ValueError("draft q's support must be increasing ids >= 0")
        if self.point.ndim != 1 or self.point.dtype != np.bool_:
            raise ValueError(f"draft point masses are {self.point.dtype} {self.point.shape}, expected bool [n]")
        if self.point.view(np.uint8).max(initial=0) > 1:  # a peer's bool byte that is neither 0 nor 1
            raise ValueError("draft point masses hold a byte that is not a bool")
        if len(self.dense) != len(self.point) - np.count_nonzero(self.point):
            raise ValueError(f"draft q has {len(self.dense)} rows for {len(self.point)} candidates of which "
                             f"{np.count_nonzero(self.point)} are point masses")

    @classmethod
    def of(cls, rows: Sequence[np.ndarray | None], width: int, support: np.ndarray | None = None) -> DraftQ:
        """One entry per candidate: the row it was drawn from (`width` wide: V, or the support's S), or None
        where it was drawn from δ at itself."""
        dense = [r for r in rows if r is not None]
        return cls(np.stack(dense).astype(np.float32, copy=False) if dense else np.zeros((0, width), np.float32),
                   np.array([r is None for r in rows], dtype=bool),
                   None if support is None else np.asarray(support, np.int32))

    @classmethod
    def rows(cls, q: np.ndarray) -> DraftQ:
        """Every candidate drawn from its own row of q [n, V]."""
        return cls(np.asarray(q, np.float32), np.zeros(len(q), dtype=bool))

    def __len__(self) -> int:
        return len(self.point)

    def fits(self, vocab: int) -> bool:
        """Whether its rows are distributions over a vocabulary of `vocab` ids."""
        if self.support is None:
            return self.dense.shape[1] == vocab
        return not len(self.support) or int(self.support[-1]) < vocab

    def row(self, i: int, vocab: int) -> np.ndarray | None:
        """Candidate i's q, `vocab` wide: its dense row (written out from its support), or None for δ at its
        own token."""
        if self.point[i]:
            return None
        dense = self.dense[i - np.count_nonzero(self.point[:i])]
        if self.support is None:
            return dense
        row = np.zeros(vocab, np.float32)
        row[self.support] = dense
        return row

    def then_points(self, n: int) -> DraftQ:
        """These candidates, then `n` more drawn from δ at themselves (cache candidates after a model's tree)."""
        return DraftQ(self.dense, np.concatenate([self.point, np.ones(n, dtype=bool)]), self.support)

    def written_out(self, tokens: np.ndarray, vocab: int) -> np.ndarray:
        """The V-wide rows this stands for, [n, V], each point mass as δ at its token: what it saves sending."""
        q = np.zeros((len(self), vocab), np.float32)
        rows = np.flatnonzero(~self.point)
        if self.support is None:
            q[rows] = self.dense
        else:
            q[rows[:, None], self.support[None]] = self.dense
        q[np.flatnonzero(self.point), tokens[self.point]] = 1.0
        return q

    def arrays(self) -> dict[str, np.ndarray]:
        """Its wire arrays (module docstring)."""
        return {"q": self.dense, **({"point": self.point} if self.point.any() else {}),
                **({"support": self.support} if self.support is not None else {})}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> DraftQ | None:
        """Read back from a message's arrays; None when it carries no q (a greedy draft)."""
        q, point, support = arrays.get("q"), arrays.get("point"), arrays.get("support")
        if q is None:
            if point is not None or support is not None:
                raise ProtocolError("draft has point masses or a support but no q")
            return None
        q = q.astype(np.float32, copy=False)
        return cls(q, point if point is not None else np.zeros(len(q), dtype=bool), support)
