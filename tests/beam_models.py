"""Toy language models over a tiny vocabulary, the DSBD decoding loop around them, and the exact law
of target-only beam sampling they induce: what the beam tests compare.

A model's next-token law is a fixed random function of the sequence, so beam sampling's law over
multisets of sequences can be enumerated step by step (W i.i.d. cells of p_beam per step).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations_with_replacement
from math import factorial, prod

import numpy as np

from specsched.runtime.core.beams import beam_distribution, draw, joint_logprobs, log_softmax, search_step
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_forest import DraftLayer, Forest, ForestVerdict, verify_forest


class ToyModel:
    """Logits of a sequence: N(0, 1.5^2) per token, seeded by the sequence; a draft ``like`` another
    model mixes in that model's logits with weight ``agreement``."""

    def __init__(self, vocab: int, seed: int, like: ToyModel | None = None, agreement: float = 0.0):
        self.vocab, self.seed, self.like, self.agreement = vocab, seed, like, agreement
        self._next: dict[tuple[int, ...], np.ndarray] = {}

    def logits(self, seq: tuple[int, ...]) -> np.ndarray:
        own = np.random.default_rng([self.seed, len(seq), *seq]).normal(0, 1.5, self.vocab)
        return own if self.like is None else self.agreement * self.like.logits(seq) + (1 - self.agreement) * own

    def next_logprobs(self, seq: tuple[int, ...]) -> np.ndarray:
        if seq not in self._next:
            self._next[seq] = log_softmax(self.logits(seq))
        return self._next[seq]

    def logprob(self, seq: tuple[int, ...]) -> float:
        return float(sum(self.next_logprobs(seq[:i])[seq[i]] for i in range(len(seq))))


def multinomial_law(p: np.ndarray, width: int) -> dict[tuple[int, ...], float]:
    """P(multiset of ``width`` i.i.d. cells of p) = width! / prod(c_i!) prod p_i^c_i, keyed by sorted cells."""
    law = {}
    for cells in combinations_with_replacement(range(p.size), width):
        counts = Counter(cells).values()
        law[cells] = factorial(width) / prod(factorial(c) for c in counts) * prod(p[c] for c in cells)
    return law


def grow_forest(target: ToyModel, draft: ToyModel | None, beams: list[tuple[int, ...]], params: SamplingParams,
                drafts: int, gamma: int, rng: np.random.Generator) -> Forest:
    """The draft beam-samples (beam-searches at temperature 0) ``gamma`` layers of ``drafts`` beams from
    ``beams``; the target's next-token log-probabilities after every node come with them."""
    nodes, layers = beams, []
    draft_logprobs = np.array([draft.logprob(s) for s in beams]) if gamma else None
    for _ in range(gamma):
        joint = joint_logprobs(draft_logprobs, np.array([draft.next_logprobs(s) for s in nodes]))
        if params.greedy:
            q, best = None, search_step(joint, drafts)
            parents, tokens = best.parents, best.tokens
        else:
            q = beam_distribution(joint, params)
            parents, tokens = draw(q, drafts, rng)
        nodes = [nodes[b] + (int(v),) for b, v in zip(parents, tokens)]
        layers.append(DraftLayer(parents, tokens, q, np.array([target.next_logprobs(s) for s in nodes])))
        draft_logprobs = joint[parents, tokens]
    return Forest(np.array([target.logprob(s) for s in beams]), np.array([target.next_logprobs(s) for s in beams]),
                  tuple(layers))


def decode(target: ToyModel, draft: ToyModel | None, params: SamplingParams, *, width: int, drafts: int, gamma: int,
           steps: int, rng: np.random.Generator, ordered: bool = False) -> tuple[list, list[ForestVerdict]]:
    """DSBD iterations from the empty prompt until ``steps`` steps; gamma = 0 is target-only decoding.

    Returns the beams after each step - a sorted tuple of sequences (a multiset), or with ``ordered``
    the list of (sequence, joint log-probability) in the verifier's order - and the verdicts.
    """
    beams: list[tuple[int, ...]] = [()]
    history, verdicts = [], []
    while len(history) < steps:
        verdict = verify_forest(grow_forest(target, draft, beams, params, drafts, gamma, rng), params, width, rng)
        verdicts.append(verdict)
        for step in verdict.steps:
            beams = [beams[b] + (int(v),) for b, v in zip(step.parents, step.tokens)]
            history.append(list(zip(beams, step.logprobs.tolist())) if ordered else tuple(sorted(beams)))
    return history[:steps], verdicts


def beam_sampling_law(target: ToyModel, params: SamplingParams, width: int, steps: int) -> list[dict]:
    """The exact law of the beams (multiset of sequences) after each of ``steps`` steps of target-only
    beam sampling from the empty prompt."""
    law: dict[tuple, float] = {((),): 1.0}
    laws = []
    for _ in range(steps):
        new: dict[tuple, float] = defaultdict(float)
        for beams, weight in law.items():
            joint = joint_logprobs(np.array([target.logprob(s) for s in beams]),
                                   np.array([target.next_logprobs(s) for s in beams]))
            for cells, prob in multinomial_law(beam_distribution(joint, params).ravel(), width).items():
                if prob > 0:
                    grown = tuple(sorted(beams[c // target.vocab] + (c % target.vocab,) for c in cells))
                    new[grown] += weight * prob
        law = dict(new)
        laws.append(law)
    return laws
