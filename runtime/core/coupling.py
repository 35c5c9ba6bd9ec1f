"""Gumbel coupling (`--coupling gumbel`): speculative sampling whose text does not depend on the draft.

The default acceptance rule (scheduler/acceptance.py, Leviathan et al. 2023) accepts a drafted x with
probability min(1, p(x)/q(x)) and otherwise draws from norm(max(0, p - q)). Each token it emits follows p
exactly, but which token depends on the q the draft happened to have: a draft restarted after a crash,
another draft length, another worker's calibration, another policy's batching - each can change the text
of a seeded sampled run, though never its distribution.

Here every token position i of a sequence owns fixed noise E_i = (E_i,v) for v in the vocabulary, i.i.d.
Exp(1), drawn from a counter-based stream keyed by (seed, sequence, i) and nothing else. The target's token
at i is

    y_i = argmax_v  p_i(v) / E_i,v          (the exponential race, i.e. Gumbel-max: argmax log p + G)

which is an exact draw from p_i: P(y = v) = p(v) / Σ p, since min_v E_v / p(v) is a race of exponentials
with rates p(v). The draft proposes x_i = argmax_v q_i(v) / E_i,v with the same noise (siblings: the next
largest ratios, which is Gumbel-top-k, a draw without replacement), and the verifier accepts x_i iff
x_i == y_i - the greedy rule with y in place of argmax p. So the committed text is y_1, y_2, ...: a
function of the seed and the target alone, whatever drafted, and `ar` with the same seed writes it too.

The price is acceptance: P(x = y) >= (1 - TV(p, q)) / (1 + TV(p, q)) for this coupling (Daliri et al.,
"Coupling without communication and drafter-invariant speculative decoding", 2025), where the residual
rule reaches 1 - TV; measured on the default pair in BENCHMARKS.md (the Gumbel coupling).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

COUPLINGS = ("residual", "gumbel")


@lru_cache(maxsize=16)  # siblings and a tree's nodes at one depth share a row; each row is 0.4 MB at 49,152
def race(seed: int, sequence: int, position: int, vocab: int) -> np.ndarray:
    """E_i: `vocab` i.i.d. Exp(1) clocks of token position `position` (prompt included) of a sequence,
    Philox keyed by (seed, sequence, 7, position): the same numbers in every process (read-only)."""
    key = np.random.SeedSequence([seed, sequence, 7, position])  # 7: sampling.stream's purposes are 1-6
    clocks = np.random.Generator(np.random.Philox(key)).standard_exponential(vocab)
    clocks.flags.writeable = False
    return clocks


def winners(probs: np.ndarray, clocks: np.ndarray, width: int = 1) -> list[int]:
    """The `width` tokens with the largest p(v) / E_v among those with p(v) > 0, best first: the first is
    an exact draw from norm(p), the rest continue it without replacement (Gumbel-top-k)."""
    ratio = np.asarray(probs, dtype=np.float64) / clocks[:len(probs)]
    if width == 1:
        return [int(np.argmax(ratio))]
    alive = int(np.count_nonzero(ratio > 0))
    width = min(width, alive)
    top = np.argpartition(-ratio, width - 1)[:width]
    return [int(v) for v in top[np.argsort(-ratio[top], kind="stable")]]


@dataclass(frozen=True, slots=True)
class Race:
    """The clocks of one sequence from token position `start` on: `at(d)` is E_{start + d}."""
    seed: int
    sequence: int
    start: int

    def at(self, depth: int, vocab: int) -> np.ndarray:
        return race(self.seed, self.sequence, self.start + depth, vocab)
