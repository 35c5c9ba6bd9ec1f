"""A backend model seen after a prompt, as tests/beam_models.py reads a model (``vocab``, ``next_logprobs``,
``logprob`` of a continuation), so its exact beam-sampling law and its plain beam search can be computed
with no cache, no batching and no tree: the references the model-facing DSBD layer is compared with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specsched.runtime.backends.backend import LanguageModel
from specsched.runtime.core.beams import log_softmax
from specsched.workers.beam_drafter import BeamDraft


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
