"""Deciding what of a draft the target accepts. This is where losslessness lives.

Greedy (temperature 0): accept the longest prefix of draft tokens equal to the target's argmax,
then append the target's argmax at the first mismatch (or after the last token: the bonus).

Sampled (speculative sampling, Leviathan et al. 2023; Chen et al. 2023): draft token x_i was drawn
from q_i; accept it with probability min(1, p_i(x_i) / q_i(x_i)). At the first rejection draw the
replacement from norm(max(0, p_i - q_i)); if every token is accepted draw a bonus from p_{n+1}.
Then each emitted token is distributed exactly as p, whatever q is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsched.runtime.sampling import SamplingParams, distribution, normalised, sample


@dataclass(slots=True)
class Outcome:
    path: list[int]       # indices of the accepted draft tokens
    tokens: list[int]     # accepted tokens, then the target's correction or bonus token
    resampled: bool       # the last token came from the residual after a rejection

    @property
    def accepted(self) -> int:
        return len(self.path)


def verify_chain(logits: np.ndarray, draft: np.ndarray, q: np.ndarray | None,
                 params: SamplingParams, rng: np.random.Generator) -> Outcome:
    """``logits`` [n + 1, V]: row i is the target's prediction for draft position i (row n: bonus)."""
    n = len(draft)
    if params.greedy:
        best = logits.argmax(axis=-1)
        m = 0
        while m < n and draft[m] == best[m]:
            m += 1
        return Outcome(list(range(m)), [int(t) for t in draft[:m]] + [int(best[m])], False)
    if q is None:
        raise ValueError("a sampled draft must carry the q it was sampled from")
    p = distribution(logits, params)
    for i in range(n):
        x = int(draft[i])
        p_i, q_i = normalised(p[i]), normalised(q[i])
        # accept with probability min(1, p/q): u < p/q  <=>  u * q < p  (u in [0, 1))
        if rng.random() * q_i[x] < p_i[x]:
            continue
        residual = np.maximum(p_i - q_i, 0.0)
        # residual mass is 0 only if p == q, where rejection is impossible; guard against rounding
        y = sample(residual if residual.sum() > 0 else p_i, rng)
        return Outcome(list(range(i)), [int(t) for t in draft[:i]] + [y], True)
    return Outcome(list(range(n)), [int(t) for t in draft] + [sample(normalised(p[n]), rng)], False)


def next_token(logits_row: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Target-only decoding (modes ar and parallel): argmax, or a draw from p."""
    if params.greedy:
        return int(logits_row.argmax())
    return sample(normalised(distribution(logits_row[None], params)[0]), rng)
