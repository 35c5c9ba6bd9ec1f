"""References for the model-facing DSBD layer, shared by the sim and the tiny-transformers tests.

``AfterPrompt``: a backend model seen after a prompt, as tests/beam_models.py reads a model (``vocab``,
``next_logprobs``, ``logprob`` of a continuation), so its exact beam-sampling law and its plain beam search
are computed with no cache, no batching and no tree. ``assert_forest_read_as_plain_forwards``: the rows the
verifier reads from its batched forest forward against one plain forward per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specsched.runtime.backends.backend import LanguageModel
from specsched.runtime.core.beam_trees import BeamDraft
from specsched.runtime.core.beams import beam_stream, log_softmax
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_allocation import allocate, combine
from specsched.scheduler.beam_verify import read_forest
from specsched.workers.beam_drafter import draft_tree


class AfterPrompt:
    def __init__(self, logits_after: Callable[[list[int]], np.ndarray], prompt: Sequence[int], vocab: int):
        self.logits_after, self.prompt, self.vocab = logits_after, list(prompt), vocab
        self._next: dict[tuple[int, ...], np.ndarray] = {}

    @classmethod
    def fresh_forwards(cls, model: LanguageModel, prompt: Sequence[int]) -> AfterPrompt:
        """Every next-token row from one forward of the whole context on a new cache."""
        return cls(lambda ctx: model.forward(model.new_cache(), ctx)[-1], prompt, model.vocab_size)

    def next_logprobs(self, seq: tuple[int, ...]) -> np.ndarray:
        if seq not in self._next:
            self._next[seq] = log_softmax(self.logits_after(self.prompt + list(seq)))
        return self._next[seq]

    def logprob(self, seq: tuple[int, ...]) -> float:
        return float(sum(self.next_logprobs(seq[:i])[seq[i]] for i in range(len(seq))))


def node_contexts(forest: BeamDraft, contexts: Sequence[Sequence[int]]) -> list[list[list[int]]]:
    """Per layer, the full token list of every node: its input beam's context and its path."""
    above, out = [list(c) for c in contexts], []
    for layer in forest.layers:
        above = [above[p] + [int(t)] for p, t in zip(layer.parents, layer.tokens)]
        out.append(above)
    return out


def draft_forest(draft, caches, contexts: Sequence[Sequence[int]], logprobs: np.ndarray, params: SamplingParams, *,
                 beams: int, gamma: int, rng: np.random.Generator, seed: int = 0) -> BeamDraft:
    """A forest as the served DSBD drafts it: counts from ``rng``, one tree per input beam from its own stream,
    combined (and shuffled) with ``rng``."""
    counts = allocate(logprobs, params, beams, gamma, rng)
    trees = [draft_tree(draft, cache, ctx, lp, params, n, beam_stream(seed, 0, slot, 1))
             for slot, (cache, ctx, lp, n) in enumerate(zip(caches, contexts, logprobs, counts))]
    return combine(trees, logprobs, params, rng)


def layout_case(target, draft, params: SamplingParams, seed: int):
    """Three input beams of different lengths; target and draft caches that hold a stale tail, nothing, or
    exactly the context. Returns (contexts, logprobs, target caches, draft caches, forest)."""
    contexts = [[1, 2, 3, 4], [5, 6], [7, 1, 1, 2, 3]]
    logprobs = np.array([-1.0, -2.0, -0.5])
    caches = {}
    for name, model in (("target", target), ("draft", draft)):
        stale, empty, exact = model.new_cache(), model.new_cache(), model.new_cache()
        model.forward(stale, [1, 2, 6, 6, 6])
        model.forward(exact, contexts[2])
        caches[name] = [stale, empty, exact]
    forest = draft_forest(draft, caches["draft"], contexts, logprobs, params, beams=5, gamma=3,
                          rng=np.random.default_rng(seed), seed=seed)
    return contexts, logprobs, caches["target"], caches["draft"], forest


def assert_forest_read_as_plain_forwards(target, draft, assert_same) -> None:
    """Every row the verifier takes from its one batched tree forward equals a plain forward of that node's
    whole context on a fresh cache; the draft's caches hold exactly the contexts again."""
    contexts, _, caches, drafts, forest = layout_case(target, draft, SamplingParams(2.0), seed=3)
    assert [c.tokens for c in drafts] == contexts and all(c.linear for c in drafts)
    trees = forest.trees()
    assert sum(len(t.tokens) for t in trees) == 15 and sum(len(t.tokens) > 0 for t in trees) > 1  # a forest
    assert any(len(np.unique(t.parents)) < len(t.parents) for t in trees)  # with a node of two children
    seen = read_forest(target, caches, contexts, forest)

    def plain(ctx: list[int]):
        return target.forward(target.new_cache(), ctx)[-1]

    for row, ctx in zip(seen.inputs, contexts):
        assert_same(row, plain(ctx))
    for rows, nodes in zip(seen.layers, node_contexts(forest, contexts)):
        for row, ctx in zip(rows, nodes):
            assert_same(row, plain(ctx))
    # stale tail cropped, the empty cache reads all, the exact one re-reads its last token, plus 15 nodes
    assert seen.read == (4 - 2) + 2 + 1 + 15
