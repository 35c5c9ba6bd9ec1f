"""Verifying one layer of a DSBD draft forest (Algorithm 1, lines 13-31): W_L output beams drawn
i.i.d. from the target's p_beam, as many of them as possible taken from the draft's beams.

The rule. The layer's candidates x_1, x_2, ... are draft beams drawn i.i.d. from q (the draft's
q_beam, restricted to the cells this layer verifies: see scheduler/beam_forest.py), tried in draft
order with p' = p = p_beam at the start:

    accept x_i with probability min(1, p'(x_i) / q(x_i)), then p' <- p;
    otherwise p' <- norm(max(p' - q, 0));
    stop at W_L accepted.

If the candidates run out with a < W_L accepted, the layer is short: one more beam is drawn from p'
and the remaining W_L - a - 1 from p. (The paper's text and Algorithm 1 write the ratio upside down,
q/p'; with that ratio the output is not distributed as p.)

Why the W_L outputs are i.i.d. p (Theorem 3.1). Call a *round* the stretch from a reset of p' to the
next acceptance. One round with target r and n >= 0 i.i.d. q-candidates outputs y ~ r, by induction
on n: for n = 0, y is drawn from r itself; for n >= 1,

    P(y = x) = q(x) min(1, r(x)/q(x)) + (1 - sum_z min(r, q)(z)) r'(x)
             = min(r, q)(x) + max(r - q, 0)(x) = r(x),     r' = norm(max(r - q, 0)),

since the residual's mass is 1 - sum min(r, q) and the remaining n - 1 candidates are i.i.d. q and
untouched (the induction hypothesis gives y ~ r' from them). Round k starts at a candidate index N_k
that is a stopping time of (candidate, uniform) pairs, so the candidates after N_k are still i.i.d.
q and independent of rounds 1..k-1; round k starts from p. Hence y_k given y_1..y_{k-1} (and how many
candidates they used) is distributed as p, for every k <= W_L: y_1..y_{W_L} are i.i.d. p and their
multiset is Multinomial(W_L, p). A short layer's "one from p'" finishes the round that ran out of
candidates, and each "from p" is a round with n = 0. The rule breaks if the candidates are not i.i.d.
q: drawn without replacement, or with improbable draws replaced by the argmax, the q in the ratio is
not the law the candidates came from.

Greedy (temperature 0): a layer's output is the target's W_L best cells (``search_step``); the layer
is accepted when every one of them is a candidate (each candidate matches at most one), and the
output is then those candidates, in the target's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.core.beams import draw, search_step

__all__ = ["LayerOutcome", "verify_layer", "verify_layer_greedy"]


@dataclass(frozen=True, slots=True)
class LayerOutcome:
    """A layer's W_L output beams: cells (row of p, token) and the candidate each one is."""
    parents: np.ndarray  # [W_L] int: the row (input beam of the layer) each output beam extends
    tokens: np.ndarray   # [W_L] int
    nodes: np.ndarray    # [W_L] int: index of the accepted candidate, or -1 where the target drew it

    @property
    def full(self) -> bool:
        """Every output beam is an accepted candidate: the next draft layer can be verified."""
        return bool(np.all(self.nodes >= 0))


def verify_layer(p: np.ndarray, q: np.ndarray, parents: np.ndarray, tokens: np.ndarray, width: int,
                 rng: np.random.Generator) -> LayerOutcome:
    """The sampled rule above. ``p``, ``q`` [R, V]: target and draft distributions over the same
    cells (any positive scale; q may be all zero when there are no candidates); ``parents``,
    ``tokens``: the candidates' cells in draft order. Accepted beams come first, in draft order."""
    p = np.asarray(p, dtype=np.float64)
    p = p / p.sum()
    q = np.asarray(q, dtype=np.float64)
    q = q / q.sum() if q.sum() > 0 else q
    residual, nodes = p, []
    for i, (b, v) in enumerate(zip(parents, tokens)):
        if len(nodes) == width:
            break
        # accept with probability min(1, p'(x) / q(x)):  u < p'/q  <=>  u·q < p'  (u uniform on [0, 1))
        if rng.random() * q[b, v] < residual[b, v]:
            nodes.append(i)
            residual = p
        else:
            rest = np.maximum(residual - q, 0.0)
            # rest has no mass only if p' == q, where a rejection is impossible; guard rounding
            residual = rest / rest.sum() if rest.sum() > 0 else residual
    nodes = np.array(nodes, dtype=np.int64)
    out_parents, out_tokens = np.asarray(parents)[nodes], np.asarray(tokens)[nodes]
    if len(nodes) < width:
        b1, v1 = draw(residual, 1, rng)
        bs, vs = draw(p, width - len(nodes) - 1, rng)
        out_parents = np.concatenate([out_parents, b1, bs])
        out_tokens = np.concatenate([out_tokens, v1, vs])
        nodes = np.concatenate([nodes, np.full(width - len(nodes), -1)])
    return LayerOutcome(out_parents.astype(np.int64), out_tokens.astype(np.int64), nodes)


def verify_layer_greedy(joint: np.ndarray, parents: np.ndarray, tokens: np.ndarray, width: int) -> LayerOutcome:
    """Temperature 0: the ``width`` best cells of the target's ``joint`` log-probabilities [R, V], each
    matched to the first unused candidate with the same cell."""
    best = search_step(joint, width)
    unused = list(range(len(tokens)))
    nodes = []
    for b, v in zip(best.parents, best.tokens):
        match = next((i for i in unused if parents[i] == b and tokens[i] == v), -1)
        if match >= 0:
            unused.remove(match)
        nodes.append(match)
    return LayerOutcome(best.parents.astype(np.int64), best.tokens.astype(np.int64), np.array(nodes, dtype=np.int64))
