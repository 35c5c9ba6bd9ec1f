"""Deciding what of a draft the target accepts. This is where losslessness lives.

Greedy (temperature 0): accept the longest prefix of draft tokens equal to the target's argmax,
then append the target's argmax at the first mismatch (or after the last token: the bonus).

Sampled (speculative sampling, Leviathan et al. 2023; Chen et al. 2023): draft token x_i was drawn
from q_i; accept it with probability min(1, p_i(x_i) / q_i(x_i)). At the first rejection draw the
replacement from norm(max(0, p_i - q_i)); if every token is accepted draw a bonus from p_{n+1}.
Then each emitted token is distributed exactly as p, whatever q is.

Coupled (`--coupling gumbel`, runtime/core/coupling.py): the greedy rule with the target's token at
depth d taken as y = argmax p(v) / E_v over the sequence's fixed clocks E of that position, an exact draw
from p; q is not read, so the text does not depend on the draft.

A point-mass candidate (q = δ_x, runtime/core/draft_q.py) takes the same rule in closed form:
min(1, p(x)/δ_x(x)) = p(x), and max(0, p - δ_x) is p with x zeroed (p(x) <= 1, every other entry
unchanged), so it is accepted iff u < p(x) and otherwise p <- norm(p with x zeroed). These are the dense
rule's own floating-point operations on the δ row (u * 1.0 = u, p(x) - 1.0 <= 0 clamps to 0.0, y - 0.0 = y)
without building it: the same outcome and the same draws (tests/test_point_mass.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.core.coupling import Race, winners
from ..runtime.core.draft_q import DraftQ
from ..runtime.core.sampling import SamplingParams, distribution, normalised, sample


@dataclass(slots=True)
class Outcome:
    path: list[int]       # indices of the accepted draft tokens
    tokens: list[int]     # accepted tokens, then the target's correction or bonus token
    resampled: bool       # the last token came from the residual after a rejection

    @property
    def accepted(self) -> int:
        return len(self.path)


def verify_chain(logits: np.ndarray, draft: np.ndarray, q: DraftQ | None,
                 params: SamplingParams, rng: np.random.Generator, race: Race | None = None) -> Outcome:
    """``logits`` [n + 1, V]: row i is the target's prediction for draft position i (row n: bonus)."""
    parents = np.arange(-1, len(draft) - 1)
    return verify_tree(logits[0], logits[1:], draft, parents, q, params, rng, race)


def verify_tree(root: np.ndarray, rows: np.ndarray, tokens: np.ndarray, parents: np.ndarray,
                q: DraftQ | None, params: SamplingParams, rng: np.random.Generator,
                race: Race | None = None) -> Outcome:
    """Walk a draft tree from the root (multi-candidate speculative decoding, Yang et al. 2024).

    ``root`` is the target's logits after the committed prefix, ``rows[i]`` after draft token i.
    At a node, its children are tried in draft order: child x (drawn from q_x) is accepted with
    probability min(1, p'(x) / q_x(x)); on rejection p' <- norm(max(0, p' - q_x)). Drawing siblings
    without replacement is expressed by the q each sibling travels with (the previous siblings
    zeroed out), so one rule covers both; a point mass stays δ at its token. If every child is
    rejected the next token is drawn from p'; below an accepted leaf a bonus token is drawn from p.
    A chain is the tree of width one. Coupled, `race` holds the sequence's clocks from the root's position.
    """
    children: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        children.setdefault(int(par), []).append(i)
    path: list[int] = []
    node, logits = -1, root
    while True:
        kids = children.get(node, [])
        if params.greedy or params.coupled:
            best = int(logits.argmax()) if params.greedy else _raced(logits, params, race, len(path))
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
            taken, p = _try(p, int(tokens[j]), q.row(j, len(p)), rng)
            if taken:
                accepted = j
                break
        if accepted is None:
            return Outcome(path, [int(tokens[j]) for j in path] + [sample(p, rng)], bool(kids))
        path.append(accepted)
        node, logits = accepted, rows[accepted]


def _try(p: np.ndarray, x: int, row: np.ndarray | None, rng: np.random.Generator) -> tuple[bool, np.ndarray]:
    """Child x, drawn from `row` (None: from δ_x), against p: accepted, or the p the next sibling is tried with."""
    if row is None:
        # q = δ_x: min(1, p(x) / 1) = p(x), and max(0, p - δ_x) = p with x zeroed
        if rng.random() < p[x]:
            return True, p
        residual = p.copy()
        residual[x] = 0.0
    else:
        q = normalised(row)
        # accept with probability min(1, p/q): u < p/q  <=>  u * q < p  (u in [0, 1))
        if rng.random() * q[x] < p[x]:
            return True, p
        residual = np.maximum(p - q, 0.0)
    # residual mass is 0 only if p == q, where rejection is impossible; guard rounding
    total = residual.sum()
    return False, residual / total if total > 0 else p


def next_token(logits_row: np.ndarray, params: SamplingParams, rng: np.random.Generator,
               race: Race | None = None) -> int:
    """Target-only decoding (modes ar and parallel): argmax, or a draw from p (coupled: the raced one, so
    `ar` writes the text the coupled speculative modes write with the same seed)."""
    if params.greedy:
        return int(logits_row.argmax())
    if params.coupled:
        return _raced(logits_row, params, race, 0)
    return sample(normalised(distribution(logits_row[None], params)[0]), rng)


def _raced(logits: np.ndarray, params: SamplingParams, race: Race | None, depth: int) -> int:
    """The target's token at `depth` below the race's start: argmax p(v) / E_v (coupling.py)."""
    if race is None:
        raise ValueError("a coupled verification needs the sequence's race (SequenceState.race)")
    p = normalised(distribution(logits[None], params)[0])
    return winners(p, race.at(depth, len(p)))[0]
