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

from specsched.runtime.core.sampling import SamplingParams, distribution, normalised, sample


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
    parents = np.arange(-1, len(draft) - 1)
    return verify_tree(logits[0], logits[1:], draft, parents, q, params, rng)


def verify_tree(root: np.ndarray, rows: np.ndarray, tokens: np.ndarray, parents: np.ndarray,
                q: np.ndarray | None, params: SamplingParams, rng: np.random.Generator) -> Outcome:
    """Walk a draft tree from the root (multi-candidate speculative decoding, Yang et al. 2024).

    ``root`` is the target's logits after the committed prefix, ``rows[i]`` after draft token i.
    At a node, its children are tried in draft order: child x (drawn from q_x) is accepted with
    probability min(1, p'(x) / q_x(x)); on rejection p' <- norm(max(0, p' - q_x)). Drawing siblings
    without replacement is expressed by the q each sibling travels with (the previous siblings
    zeroed out), so one rule covers both. If every child is rejected the next token is drawn from
    p'; below an accepted leaf a bonus token is drawn from p. A chain is the tree of width one.
    """
    children: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        children.setdefault(int(par), []).append(i)
    path: list[int] = []
    node, logits = -1, root
    while True:
        kids = children.get(node, [])
        if params.greedy:
            best = int(logits.argmax())
            match = next((j for j in kids if tokens[j] == best), None)
            if match is None:
                return Outcome(path, [int(tokens[j]) for j in path] + [best], False)
            path.append(match)
            node, logits = match, rows[match]
            continue
        if q is None:
            raise ValueError("a sampled draft must carry the q each token was sampled from")
        p = normalised(distribution(logits[None], params)[0])
        accepted = None
        for j in kids:
            x, q_j = int(tokens[j]), normalised(q[j])
            # accept with probability min(1, p/q): u < p/q  <=>  u * q < p  (u in [0, 1))
            if rng.random() * q_j[x] < p[x]:
                accepted = j
                break
            residual = np.maximum(p - q_j, 0.0)
            # residual mass is 0 only if p == q_j, where rejection is impossible; guard rounding
            p = residual / residual.sum() if residual.sum() > 0 else p
        if accepted is None:
            return Outcome(path, [int(tokens[j]) for j in path] + [sample(p, rng)], bool(kids))
        path.append(accepted)
        node, logits = accepted, rows[accepted]


def next_token(logits_row: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Target-only decoding (modes ar and parallel): argmax, or a draw from p."""
    if params.greedy:
        return int(logits_row.argmax())
    return sample(normalised(distribution(logits_row[None], params)[0]), rng)
