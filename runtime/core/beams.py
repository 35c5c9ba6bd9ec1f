"""Beam sampling over (beams x vocabulary), and deterministic beam search at temperature 0.

A beam is a sequence x_{1:t} kept with its joint log-probability log p(x_{1:t}) under the raw model
(temperature 1, no top-k/top-p: the warp shapes what is drawn, not what is remembered). Extending
beam b of the input beams I by token v gives the joint

    log p(x^b_{1:t}, v) = log p(x^b_{1:t}) + log p(v | x^b_{1:t})

and one step of beam sampling (Eq. 1 of the DSBD paper) draws the W next beams i.i.d. from

    p_beam = T o (p(x_{1:t+1}) / P),    P = sum_{(b, v) in I x V} p(x^b_{1:t}, v).

T is the warp of ``SamplingParams``, applied to that normalised joint as ONE distribution over the
flattened support I x V (|I|·|V| cells), exactly as it is applied to one next-token distribution:
temperature tau gives pi^(1/tau) / sum pi^(1/tau) = softmax(log-joint / tau), in which P cancels;
top-k keeps the k most likely (beam, token) cells over all beams, not k per beam; top-p keeps the
smallest set of most likely cells whose mass reaches top_p. Hence p_beam is ``distribution`` of the
flattened log-joint. Draws are with replacement: two output beams may be the same cell (duplicates
are kept, each a beam of its own).

Deterministic beam search keeps the W cells of largest joint log-probability, ties broken by
(beam index, token id): the order of the flattened index b·|V| + v.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sampling import SamplingParams, distribution, top_tokens

__all__ = ["BeamStep", "beam_distribution", "beam_stream", "draw", "joint_logprobs", "log_softmax",
           "lowest_perplexity", "sample_step", "search_step"]

BEAM_DRAFT_TAG = 4  # after sampling.stream's "draft", "verify" and "target"


@dataclass(frozen=True, slots=True)
class BeamStep:
    """W beams, each one token longer than the beam of the previous step it extends."""
    parents: np.ndarray   # [W] int: the previous step's beam each one extends
    tokens: np.ndarray    # [W] int: the token it appends
    logprobs: np.ndarray  # [W] float64: its joint log p(x_{1:t+1}) under the raw model

    def __post_init__(self) -> None:
        if not len(self.parents) == len(self.tokens) == len(self.logprobs):
            raise ValueError(f"a beam step needs one parent, token and log-probability per beam, got "
                             f"{len(self.parents)}, {len(self.tokens)}, {len(self.logprobs)}")

    @property
    def width(self) -> int:
        return len(self.tokens)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Rows of logits [..., V] -> rows of next-token log-probabilities (float64)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def joint_logprobs(logprobs: np.ndarray, next_logprobs: np.ndarray) -> np.ndarray:
    """log p(x^b_{1:t}, v) = log p(x^b_{1:t}) + log p(v | x^b_{1:t}): [W] and [W, V] -> [W, V]."""
    return np.asarray(logprobs, dtype=np.float64)[:, None] + np.asarray(next_logprobs, dtype=np.float64)


def beam_distribution(joint: np.ndarray, params: SamplingParams) -> np.ndarray:
    """p_beam = T o (p / P) over the cells (beam, token) of ``joint`` [W, V]; float64, sums to 1."""
    if params.greedy:
        raise ValueError("temperature 0 is deterministic beam search (search_step), not a distribution")
    p = distribution(joint.reshape(-1), params).astype(np.float64)
    return (p / p.sum()).reshape(joint.shape)


def draw(dist: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` i.i.d. cells of ``dist`` [W, V] (any positive scale) by inverse CDF, one uniform each:
    returns (beam indices, token ids)."""
    flat = np.asarray(dist, dtype=np.float64).reshape(-1)
    cdf = np.cumsum(flat)
    cells = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    # u · total can round up to total; the last cell with mass is the one it belongs to
    cells = np.minimum(cells, np.flatnonzero(flat > 0)[-1])
    return np.divmod(cells, dist.shape[-1])


def beam_stream(seed: int, sequence: int, slot: int, round: int) -> np.random.Generator:
    """The draft RNG of input beam ``slot`` (its index in the beam list) of ``sequence`` in DSBD iteration
    ``round``: each tree is drafted from a stream of its own, so one process per input beam draws exactly
    what one process for all of them would."""
    key = [seed, sequence, BEAM_DRAFT_TAG, slot, round]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))


def search_step(joint: np.ndarray, width: int) -> BeamStep:
    """Deterministic beam search: the ``width`` most likely cells of ``joint`` [W, V], best first,
    ties to the lower (beam, token)."""
    cells = top_tokens(joint.reshape(-1), width)
    parents, tokens = np.divmod(cells, joint.shape[-1])
    return BeamStep(parents, tokens, joint[parents, tokens])


def sample_step(joint: np.ndarray, params: SamplingParams, width: int, rng: np.random.Generator) -> BeamStep:
    """One step of target-only beam decoding: ``width`` i.i.d. draws from p_beam, or beam search at
    temperature 0."""
    if params.greedy:
        return search_step(joint, width)
    parents, tokens = draw(beam_distribution(joint, params), width, rng)
    return BeamStep(parents, tokens, joint[parents, tokens])


def lowest_perplexity(step: BeamStep) -> BeamStep:
    """The memory-saving input of §3.4: keep only the beam of lowest perplexity, so the next
    iteration needs one KV cache.

    The beams of a step have the same length t, so perplexity exp(-log p(x_{1:t}) / t) is lowest at
    the largest joint log-probability (ties to the lower index). This is NOT distribution-preserving:
    the next step's p_beam is over {best} x V rather than over the W beams sampled, so the output is
    no longer a draw of beam sampling (nor of multinomial sampling): it is biased towards likely
    sequences, which is the point of §3.4 but breaks Theorem 3.1's guarantee across iterations.
    """
    best = int(np.argmax(step.logprobs))
    return BeamStep(step.parents[best:best + 1], step.tokens[best:best + 1], step.logprobs[best:best + 1])
