"""Token trees on llama.cpp's KV cache: which sequence ids each new token carries, and the rollback.

llama.cpp has no attention mask argument. A token attends to every cached cell that shares one of its
sequence ids and has a position <= its own. So a tree is verified in one ``llama_decode`` by giving
each leaf a sequence id of its own and every node the ids of all the leaves below it: along one
leaf's id, the cells form exactly one root-to-leaf chain, and a node at depth d sees its own ancestors
and nothing else. The committed prefix lives in the cache's *base* id; a leaf whose path forks from it
at length f first gets the prefix's cells [0, f) tagged with its id too (``seq_cp``: metadata only in
a unified KV cache, no copy of keys or values). The first leaf that continues the whole prefix uses
the base id itself, so a plain chain needs no extra id at all.

After the verdict ``keep`` collapses the tree onto the accepted path: the base id drops everything
past the fork, takes over the accepted cells from the leaf id that holds them, and every other leaf
id is removed (cells no id holds any more are free). This module plans those operations; it knows
nothing of llama.cpp (``llamacpp.py`` runs them), so it is tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


class OutOfSequenceIds(RuntimeError):
    """More live sequences and tree leaves than the context's sequence ids."""


class SeqIds:
    """A pool of llama.cpp sequence ids (0 .. n-1)."""

    def __init__(self, n: int) -> None:
        self.capacity = n
        self._free = list(range(n - 1, -1, -1))

    def take(self) -> int:
        if not self._free:
            raise OutOfSequenceIds(f"all {self.capacity} llama.cpp sequence ids are in use (live sequences plus "
                                   "tree leaves being verified): verify fewer sequences or smaller trees at once")
        return self._free.pop()

    def give(self, seq: int) -> None:
        self._free.append(seq)

    @property
    def in_use(self) -> int:
        return self.capacity - len(self._free)


@dataclass(slots=True)
class TreePlan:
    """One forward's new entries as llama.cpp sequences."""

    seq_sets: list[list[int]]              # per new token: the ids it carries (first = its leaf's or base)
    forks: list[tuple[int, int]]           # (id, f): tag the base's cells [0, f) with id before decoding
    leaves: dict[int, int] = field(default_factory=dict)  # leaf cache index -> its id
    fork_at: dict[int, int] = field(default_factory=dict)  # leaf cache index -> prefix length it hangs on


def plan_tree(parents: Sequence[int], base_len: int, base: int, ids: SeqIds) -> TreePlan:
    """Sequence ids for entries ``base_len ..`` whose absolute parents are ``parents`` (topological order).

    Entries below ``base_len`` are the committed chain held by ``base``. Temporary ids come from ``ids``
    (given back by ``plan_keep``'s caller, or here if the pool runs dry).
    """
    n = len(parents)
    has_child = [False] * n
    for p in parents:
        if p >= base_len:
            has_child[p - base_len] = True
    sets: list[list[int]] = [[] for _ in range(n)]
    plan = TreePlan(sets, [])
    taken: list[int] = []
    base_used = False
    try:
        for leaf in (j for j in range(n) if not has_child[j]):
            path = [leaf]
            while parents[path[-1]] >= base_len:
                path.append(parents[path[-1]] - base_len)
            fork = parents[path[-1]] + 1  # the prefix length this path hangs on
            if fork == base_len and not base_used:
                seq, base_used = base, True
            else:
                seq = ids.take()
                taken.append(seq)
                plan.forks.append((seq, fork))
            plan.leaves[base_len + leaf] = seq
            plan.fork_at[base_len + leaf] = fork
            for j in path:
                sets[j].append(seq)
    except OutOfSequenceIds:
        for seq in taken:
            ids.give(seq)
        raise
    return plan


@dataclass(frozen=True, slots=True)
class KeepPlan:
    """The KV operations that collapse a verified tree onto one path, in order."""

    ops: list[tuple]           # ("rm", id, p0, p1) | ("cp", src, dst, p0, p1); p1 = -1: to the end
    released: list[int]        # temporary ids to give back to the pool


def plan_keep(path: Sequence[int], parents: Sequence[int], base_len: int, base: int,
              plan: TreePlan | None) -> KeepPlan:
    """Keep the root-first ``path`` (cache indices) of a cache whose entries ``base_len ..`` were planned."""
    if path and list(path) != _ancestors(path[-1], parents):
        raise ValueError("keep() on llama.cpp needs a root-first path of the cache")
    end = len(path)  # the kept path's length = the position after its last entry
    temps = [] if plan is None else [s for s in plan.leaves.values() if s != base]
    if plan is None or not path or path[-1] < base_len:
        return KeepPlan([("rm", base, end, -1), *(("rm", s, -1, -1) for s in temps)], temps)
    x = path[-1]
    leaf = next(leaf for leaf in plan.leaves if x in _ancestors(leaf, parents))
    seq, fork = plan.leaves[leaf], plan.fork_at[leaf]
    if seq == base:
        ops = [("rm", base, end, -1)]
    else:
        ops = [("rm", base, fork, -1), ("rm", seq, end, -1), ("cp", seq, base, fork, end)]
    return KeepPlan([*ops, *(("rm", s, -1, -1) for s in temps)], temps)


def _ancestors(i: int, parents: Sequence[int]) -> list[int]:
    chain = []
    while i >= 0:
        chain.append(i)
        i = parents[i]
    return chain[::-1]
