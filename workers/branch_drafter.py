"""Self-Draft drafters: the target drafts for itself through branch lanes and n-gram caches.

A sequence's branch state (`Branches`) lives in the draft-worker process that owns the sequence: its
lanes (branch_lanes.py), its context cache and the shared corpus cache (branch_cache.py). Each draft
it sends carries the candidate tree retrieved from the caches and, after it, the lanes' tokens; the
verifier verifies the candidates, reads the lanes in the same forward and answers with the target's
argmax after every lane token, which fills the context cache for the next draft.

`BranchDrafter` proposes the cache candidates only (`--drafter branches`, no draft model);
`WithBranches` adds them and the lanes to another drafter's tree (`--drafter both`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..runtime.core.config import DrafterKind, RunConfig
from ..runtime.core.draft_q import DraftQ
from ..runtime.core.sampling import SamplingParams
from ..runtime.models.corpus_cache import load
from .branch_cache import GRAM, ContextCache, CorpusCache, candidate_tree
from .branch_lanes import Lanes
from .drafter import Drafter, Proposal
from .lane_process import LaneProcesses
from .lookup import NgramIndex


@dataclass(frozen=True, slots=True)
class BranchSettings:
    lanes: int                          # N: branch lanes per sequence (RunConfig.branches)
    length: int                         # L: tokens per lane at most (RunConfig.branch_length)
    corpus: CorpusCache | None = None   # None: no corpus cache
    from_context: int = 10              # candidates per step from the context cache
    from_corpus: int = 3                # ... and from the corpus cache
    processes: bool = False             # each lane in its own OS process (lane_process.py)
    lookup: int = 0                     # prompt lookup first: n-grams of the committed text (lookup.py), 0 = off


class Branches:
    """One sequence's lanes and caches."""

    def __init__(self, prompt: list[int], settings: BranchSettings) -> None:
        self.settings = settings
        self.context = ContextCache()
        self.ngrams = NgramIndex(settings.lookup) if settings.lookup >= 2 else None
        if self.ngrams is not None:
            self.ngrams.extend(prompt)
        self.lanes = None
        if settings.lanes:
            self.lanes = (LaneProcesses if settings.processes else Lanes)(prompt, settings.lanes, settings.length)

    def close(self) -> None:
        """End the lane processes, if any (the sequence is done, or its worker stops)."""
        if isinstance(self.lanes, LaneProcesses):
            self.lanes.close()

    def candidates(self, context: list[int], depth: int) -> tuple[list[int], list[int]]:
        """The candidate tree after `context`: what followed its tail earlier in the text (prompt lookup, if
        on), the context cache's 4-grams of its last token, then the corpus cache's continuations of its
        longest known tail."""
        s = self.settings
        found = [tuple(self.ngrams.follow(context[-self.ngrams.longest:], GRAM))] if self.ngrams is not None else []
        found += self.context.lookup(context[-1], s.from_context)
        if s.corpus is not None:
            found += s.corpus.lookup(context, s.from_corpus)
        return candidate_tree(found, depth)

    def commit(self, committed: list[int]) -> None:
        if self.ngrams is not None:
            self.ngrams.extend(committed)

    def lane_nodes(self, offset: int) -> tuple[list[int], list[int]]:
        return self.lanes.nodes(offset) if self.lanes is not None else ([], [])

    def learn(self, predictions: list[int]) -> None:
        """The target's argmax after each lane token: new context-cache entries, and the lanes move on."""
        if self.lanes is not None and predictions:
            for key, gram in self.lanes.update(predictions):
                self.context.add(key, gram)


def with_lanes(branches: Branches, proposal: Proposal, cache_tokens: list[int], cache_parents: list[int]) -> Proposal:
    """`proposal`'s tree, then the cache candidates as further subtrees of the root, then the lanes. A cache
    candidate is drawn from δ at itself: sampled, it is a point mass after the proposal's own q (DraftQ)."""
    n = len(proposal.tokens)
    tokens = [*proposal.tokens.tolist(), *cache_tokens]
    parents = [*proposal.parents.tolist(), *(p + n if p >= 0 else -1 for p in cache_parents)]
    lane_tokens, lane_parents = branches.lane_nodes(len(tokens))
    q, conf = proposal.q, proposal.conf
    if q is not None:
        q = q.then_points(len(cache_tokens))
    if conf is not None:  # a cache candidate has no draft-model confidence: NaN, which calibration skips
        conf = np.concatenate([conf, np.full(len(cache_tokens), np.nan, np.float32)])
    return Proposal(np.asarray(tokens + lane_tokens, np.int32), np.asarray(parents + lane_parents, np.int32), q,
                    conf, lanes=len(lane_tokens))


class BranchDrafter:
    """Candidates from the caches only (`--drafter branches`): no draft model runs, and none is loaded."""

    def __init__(self, vocab: int, params: SamplingParams, prompt: list[int], settings: BranchSettings) -> None:
        self.vocab, self.params = vocab, params
        self.rng: np.random.Generator | None = None  # the worker keys one each round; nothing here draws
        self.context = list(prompt)
        self.branches = Branches(prompt, settings)

    def hear(self, curve, queue_ahead: int) -> None:
        """Nothing to size: the caches propose what they hold."""

    def propose(self, budget: int) -> Proposal:
        q = None if self.params.greedy else DraftQ.of([], self.vocab)
        empty = Proposal(np.zeros(0, np.int32), np.zeros(0, np.int32), q)
        if budget < 1:  # the last token: the target's own, with nothing to verify
            return empty
        tokens, parents = self.branches.candidates(self.context, budget)
        return with_lanes(self.branches, empty, tokens, parents)

    def observe(self, committed: list[int], path: list[int] | None = None, aside: int = 0,
                predictions: list[int] | None = None) -> None:
        self.context.extend(committed)
        self.branches.commit(committed)
        self.branches.learn(predictions or [])

    def close(self) -> None:
        self.branches.close()

    def features_held(self) -> int:
        return -1  # no draft model: it reads no features

    def take_features(self, start: int, rows) -> None:
        pass


class WithBranches:
    """Another drafter's tree plus the cache candidates and the lanes (`--drafter both`)."""

    def __init__(self, inner: Drafter, prompt: list[int], settings: BranchSettings) -> None:
        self.inner = inner
        self.branches = Branches(prompt, settings)
        self.inner_size = 0  # nodes of the inner drafter's tree in the last proposal

    @property
    def rng(self) -> np.random.Generator:
        return self.inner.rng

    @rng.setter
    def rng(self, value: np.random.Generator) -> None:
        self.inner.rng = value

    def hear(self, curve, queue_ahead: int) -> None:
        self.inner.hear(curve, queue_ahead)

    def propose(self, budget: int) -> Proposal:
        own = self.inner.propose(budget)
        self.inner_size = len(own.tokens)
        if budget < 1:
            return own
        tokens, parents = self.branches.candidates(self.inner.context, budget)
        return with_lanes(self.branches, own, tokens, parents)

    def observe(self, committed: list[int], path: list[int] | None = None, aside: int = 0,
                predictions: list[int] | None = None) -> None:
        # a path through a cache candidate leaves nothing of the inner tree to keep in the draft's cache, and
        # the tokens it won are not the inner drafter's: they count with `aside` as tokens it did not earn
        inside = path if path is None or all(j < self.inner_size for j in path) else []
        won_elsewhere = len(path) if path and not inside else 0
        self.inner.observe(committed, inside, aside + won_elsewhere)
        self.branches.learn(predictions or [])

    def close(self) -> None:
        self.branches.close()

    def features_held(self) -> int:
        return self.inner.features_held()

    def take_features(self, start: int, rows) -> None:
        self.inner.take_features(start, rows)


def branch_drafter(config: RunConfig, model_drafter: Callable[[], Drafter], prompt: list[int],
                   vocab: int) -> Drafter | BranchDrafter | WithBranches:
    """The drafter `--drafter` asks for: the draft model's (`model_drafter()`), the caches alone (branches,
    which never calls it), or both. The corpus cache is the file the engine resolved --corpus-cache to (an
    unresolved auto: none)."""
    if config.drafter == DrafterKind.MODEL:
        return model_drafter()
    corpus = None if config.lanes.corpus_cache in ("off", "auto") else load(config.lanes.corpus_cache)
    settings = BranchSettings(config.lanes.count, config.lanes.length, corpus, processes=config.lanes.processes)
    if config.drafter == DrafterKind.BRANCHES:  # --lookup: among the candidates (the model drafter has its own)
        return BranchDrafter(vocab, config.sampling, prompt, dataclasses.replace(settings, lookup=config.draft_lookup))
    return WithBranches(model_drafter(), prompt, settings)
