"""Self-Draft's two caches of n-grams, and how their candidates become one token tree.

Context cache: what the branch lanes (branch_lanes.py) saw the target predict in this sequence's own
context. Key: one token; value: the 4 tokens that followed it (G = 4, the paper's global gram length),
in an LRU of at most 10 per key - re-inserting a 4-gram moves it to the front, the oldest falls out.

Corpus cache (runtime/models/corpus_cache.py): what follows 1..4-token keys in a public corpus, the 20
most frequent 4-token continuations per key. A lookup tries the longest key first.

Both only *propose*: each candidate token travels with q = δ, and verify_tree's multi-candidate rule
(accept d with probability p'(d), else p' <- norm(p' without d), next candidate) emits exactly p
whatever the caches hold - garbage included.
"""

from __future__ import annotations

from collections import OrderedDict

from ..runtime.models.corpus_cache import GRAM, CorpusCache

__all__ = ["GRAM", "ContextCache", "CorpusCache", "candidate_tree"]

PER_KEY = 10        # context cache: 4-grams kept per key token


class ContextCache:
    """key token -> its most recent distinct 4-grams, newest first (an LRU of PER_KEY)."""

    def __init__(self, per_key: int = PER_KEY) -> None:
        self.per_key = per_key
        self.grams: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, key: int, gram: tuple[int, ...]) -> None:
        lru = self.grams.setdefault(key, OrderedDict())
        lru[gram] = None
        lru.move_to_end(gram, last=False)  # newest first; a re-insertion moves to the front
        while len(lru) > self.per_key:
            lru.popitem(last=True)

    def lookup(self, key: int, most: int) -> list[tuple[int, ...]]:
        return list(self.grams.get(key, ()))[:most]

    def __len__(self) -> int:
        return sum(len(v) for v in self.grams.values())


def candidate_tree(candidates: list[tuple[int, ...]], depth: int) -> tuple[list[int], list[int]]:
    """Token sequences that each continue the committed context, merged into one tree (a trie: shared
    prefixes become one path), cut to `depth` tokens. Returns (tokens, parents) with parents before
    children; children keep the order their first candidate came in (the order verify_tree tries them)."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for cand in candidates:
        node = -1
        for t in cand[:depth]:
            nxt = child.get((node, t))
            if nxt is None:
                tokens.append(t)
                parents.append(node)
                nxt = child[(node, t)] = len(tokens) - 1
            node = nxt
    return tokens, parents
