"""Drafters: what a draft worker runs to propose tokens. The worker kind is pluggable.

A drafter owns one sequence's draft-side state (model cache, RNG stream). ``propose`` returns a
Draft-shaped proposal (tokens, parents, q); ``observe`` takes the verdict's committed tokens. A
chain drafter is the SEED paper's draft model; tree, beam and n-gram drafters fit the same seam.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from specsched.runtime.sampling import SamplingParams, distribution, sample
from specsched.workers.backend import LanguageModel


@dataclass(slots=True)
class Proposal:
    tokens: np.ndarray          # int32 [n]
    parents: np.ndarray         # int32 [n]
    q: np.ndarray | None        # float32 [n, V], None when greedy


class Drafter(ABC):
    def __init__(self, model: LanguageModel, params: SamplingParams, rng: np.random.Generator,
                 prompt: list[int]) -> None:
        self.model = model
        self.params = params
        self.rng = rng
        self.context = list(prompt)  # the committed sequence: prompt + verified tokens
        self.cache = model.new_cache()

    @abstractmethod
    def propose(self, budget: int) -> Proposal:
        """Draft up to ``budget`` tokens after the committed context."""

    def observe(self, committed: list[int]) -> None:
        self.context.extend(committed)


class ChainDrafter(Drafter):
    """k tokens, one draft forward each: x_i ~ q(. | context, x_<i)."""

    def propose(self, budget: int) -> Proposal:
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        if budget > 0:
            logits = self.model.forward(self.cache, self.model.sync_to(self.cache, self.context))[-1]
            for i in range(budget):
                if self.params.greedy:
                    x = int(logits.argmax())
                else:
                    q = distribution(logits[None], self.params)[0]
                    x = sample(q, self.rng)
                    qs.append(q)  # the very array x was drawn from travels to the verifier
                tokens.append(x)
                if i + 1 < budget:
                    logits = self.model.forward(self.cache, [x])[-1]
        arr = np.asarray(tokens, np.int32)
        q = np.stack(qs) if qs else None
        if q is None and not self.params.greedy:
            q = np.zeros((0, self.model.vocab_size), np.float32)
        return Proposal(arr, np.arange(-1, len(arr) - 1, dtype=np.int32), q)


DRAFTERS: dict[str, type[Drafter]] = {"chain": ChainDrafter}
