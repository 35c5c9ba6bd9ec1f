"""The draft side of DSBD: beam-sample a forest of ``gamma`` layers of W_S draft beams from the input beams.

The draft's score. Layer l's nodes are drawn i.i.d. from the draft's q_beam over (nodes of layer l-1) x V,
the input beams being layer 0. The joint score the draft warps is

    s(node) = log p_target(input beam) + sum over the node's path of log q(token | prefix),
    s(child of node a, token v) = s(a) + log q(v | a),

that is, the target's joint log-probability of the input beam (which the verifier hands out with the
beams) continued by the draft's next-token log-probabilities, and

    q^(l) = T o (exp s / sum exp s)  over (layer l-1 nodes) x V,

warped exactly as p_beam is (``beam_distribution``). Theorem 3.1 holds for any q, provided the nodes are
i.i.d. draws from the q recorded with them; starting from the target's joint instead of the draft's makes
q^(1) differ from p_beam only by the next-token factor, which is as close as the draft can get.

Greedy (temperature 0): layer l is the W_S cells of largest score (deterministic beam search on the draft),
recorded with q = None.

How the models read the forest. Every input beam roots a tree of the nodes grown from it. A tree lists its
nodes in layer order (within a layer, in the layer's order); a node's parent is a position in the same
tree, -1 for the input beam itself. A model reads the tree after the beam's context as ``lay_out`` does,
so the node at tree position j sits at cache index len(context) + j. Draft and target share this layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specsched.runtime.backends.backend import Cache, LanguageModel
from specsched.runtime.core.beams import beam_distribution, draw, joint_logprobs, log_softmax, search_step
from specsched.runtime.core.sampling import SamplingParams

__all__ = ["BeamDraft", "BeamLayer", "Tree", "draft_beams"]


@dataclass(frozen=True, slots=True)
class BeamLayer:
    """Layer l of a draft forest: n_l nodes, each a (parent, token) cell of the draft's q over layer l-1."""
    parents: np.ndarray   # [n_l] int: the node of layer l-1 it extends (layer 1: an input beam)
    tokens: np.ndarray    # [n_l] int
    q: np.ndarray | None  # [n_{l-1}, V] float64: the distribution the nodes were drawn from (None: greedy)
    roots: np.ndarray     # [n_l] int: the input beam the node grows from


@dataclass(frozen=True, slots=True)
class Tree:
    """One input beam's nodes in the order a model reads them after the beam's context."""
    tokens: np.ndarray   # [n] int
    parents: np.ndarray  # [n] int: tree position of the parent, -1 = the input beam
    layers: np.ndarray   # [n] int: the node's layer, 0-based
    nodes: np.ndarray    # [n] int: the node's index in its layer


@dataclass(frozen=True, slots=True)
class BeamDraft:
    """A draft forest: ``gamma`` layers grown from ``width_in`` input beams."""
    width_in: int
    layers: tuple[BeamLayer, ...]
    forwards: int = 0  # draft forwards it took

    def positions(self) -> tuple[np.ndarray, ...]:
        """Per layer [n_l]: each node's position in its root's tree (layer order, then index order)."""
        return tree_positions(self.layers, self.width_in)

    def trees(self) -> tuple[Tree, ...]:
        """One tree per input beam (empty where no node grows from it)."""
        columns = [([], [], [], []) for _ in range(self.width_in)]  # per root: tokens, parents, layers, nodes
        above = np.full(self.width_in, -1)  # tree position of each node of the layer above; input beams: -1
        for depth, (layer, pos) in enumerate(zip(self.layers, self.positions())):
            for i, (root, parent, token) in enumerate(zip(layer.roots, layer.parents, layer.tokens)):
                for column, value in zip(columns[root], (token, above[parent], depth, i)):
                    column.append(int(value))  # index order within a layer is tree order
            above = pos
        return tuple(Tree(*(np.array(c, dtype=np.int64) for c in cols)) for cols in columns)


def tree_positions(layers: Sequence[BeamLayer], width_in: int) -> tuple[np.ndarray, ...]:
    counts = np.zeros(width_in, dtype=np.int64)
    out = []
    for layer in layers:
        pos = np.empty(len(layer.tokens), dtype=np.int64)
        for i, root in enumerate(layer.roots):
            pos[i] = counts[root]
            counts[root] += 1
        out.append(pos)
    return tuple(out)


def draft_beams(draft: LanguageModel, caches: Sequence[Cache], contexts: Sequence[Sequence[int]],
                logprobs: np.ndarray, params: SamplingParams, *, beams: int, gamma: int,
                rng: np.random.Generator) -> BeamDraft:
    """Draft ``gamma`` layers of ``beams`` (W_S) nodes from the input beams (``contexts``, their target joint
    log-probabilities ``logprobs`` [W_in], one draft cache each). One batched draft forward per layer but the
    last: the contexts first, then each layer's nodes as trees under their roots. The caches are left holding
    exactly the contexts."""
    width_in = len(contexts)
    if gamma < 1:
        return BeamDraft(width_in, ())
    unread = [draft.sync_to(c, list(ctx)) for c, ctx in zip(caches, contexts)]
    rows = draft.forward_batch(list(caches), unread)
    after = np.stack([log_softmax(r[-1]) for r in rows])  # [n_{l-1}, V]: draft log q(. | node above)
    score, roots = np.asarray(logprobs, dtype=np.float64), np.arange(width_in)
    layers: list[BeamLayer] = []
    for depth in range(gamma):
        joint = joint_logprobs(score, after)  # s(a, v) = s(a) + log q(v | a)
        if params.greedy:
            best = search_step(joint, beams)
            parents, tokens, q = best.parents, best.tokens, None
        else:
            q = beam_distribution(joint, params)
            parents, tokens = draw(q, beams, rng)
        layers.append(BeamLayer(parents.astype(np.int64), tokens.astype(np.int64), q, roots[parents]))
        score, roots = joint[parents, tokens], roots[parents]
        if depth + 1 < gamma:
            after = _read_layer(draft, caches, contexts, layers)
    for c, ctx in zip(caches, contexts):
        draft.crop(c, len(ctx))
    return BeamDraft(width_in, tuple(layers), forwards=gamma)


def _read_layer(draft: LanguageModel, caches: Sequence[Cache], contexts: Sequence[Sequence[int]],
                layers: list[BeamLayer]) -> np.ndarray:
    """Read the last layer's nodes, each root's as one tree call, and return log q(. | node) [n_l, V]."""
    positions = tree_positions(layers, len(contexts))
    layer = layers[-1]
    above = positions[-2] if len(layers) > 1 else np.full(len(contexts), -1)
    live = np.unique(layer.roots)
    members = [np.flatnonzero(layer.roots == r) for r in live]  # index order = tree order within the layer
    # tree position j sits at cache index len(context) + j; a parent at position -1 is the context's last token
    tokens = [layer.tokens[m].tolist() for m in members]
    parents = [(len(contexts[r]) + above[layer.parents[m]]).tolist() for r, m in zip(live, members)]
    rows = draft.forward_batch([caches[r] for r in live], tokens, parents)
    after = np.empty((len(layer.tokens), draft.vocab_size))
    for m, r in zip(members, rows):
        after[m] = log_softmax(r)
    return after
