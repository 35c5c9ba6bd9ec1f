"""DSBD with one draft process per input beam: the verifier fixes every tree's node counts before drafting
(``allocate``), each process drafts its own tree (workers/beam_drafter.py ``draft_tree``), and the verifier
combines the trees into the forest it verifies (``combine``).

The mixture. Let pi^(l) be a law over the input beams (trees) that have >= 1 node in layer l-1,

    pi^(l)_b ∝ exp(log p(x^b) / T)   on those trees, 0 elsewhere      (T the temperature),

a function of the input beams' log-probabilities and of the counts of layer l-1 only. Layer l of the forest
holds N = W_S nodes:

    n^(l) ~ Multinomial(N, pi^(l)),
    tree b draws n^(l)_b nodes i.i.d. from q_b^(l), its draft's warped score over (its layer l-1 nodes) x V,
    the verifier concatenates the trees' nodes and shuffles them by a uniformly random permutation,
    and records q^(l) = sum_b pi^(l)_b q_b^(l) over (all layer l-1 nodes) x V.

Why the layer is i.i.d. q^(l), which is all verify_forest asks (scheduler/beam_forest.py). Condition on the
past: the forest up to layer l-1 and the verifier's draws so far. Fresh multinomial counts in a uniformly
random order are an i.i.d. sequence of labels from pi^(l) (both have the law P(b_1..b_N) = prod pi_{b_i}:
the counts have probability N!/prod n_b! prod pi_b^{n_b}, and each of the N!/prod n_b! orders of them is
equally likely). Given its label b, each node is an independent draw from q_b^(l): the trees are drafted
from independent streams, and a tree's draws are i.i.d. whatever the other trees hold. So the layer is an
i.i.d. sequence from the mixture sum_b pi^(l)_b q_b^(l) = q^(l). Without the shuffle, node i's tree depends
on i (tree 0's nodes first), so the candidates tried first are not draws of q^(l); with counts fixed
instead of drawn, the labels are not independent. Both bias the output (tests/test_beams_trees.py).
Any pi that is a function of the past keeps the theorem; the one above makes q^(1) the draft's joint
q_beam over (input beams x V) at temperature 1 with no top-k/top-p. The counts of every layer are drawn
before drafting: n^(l) depends on n^(l-1) alone, never on the nodes' cells.

Greedy (temperature 0): every tree gets W_S nodes per layer, its own top-W_S cells by the draft score, and
the forest keeps tree order. Layer 1 then holds every cell of the draft's joint top W_S (those of tree b
are among tree b's own top W_S cells over {b} x V). Deeper layers need not: a node of tree b that the joint
search dropped for another tree's can have children that outrank the kept node's, and tree b's own search
keeps those instead. Whatever the drafts, a greedy layer outputs the target's best cells
(``verify_layer_greedy``), so DSBD stays beam search; the drafts only decide how many layers are taken.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..runtime.core.beam_trees import BeamDraft, BeamLayer, BeamTree
from ..runtime.core.sampling import SamplingParams

__all__ = ["allocate", "combine", "tree_weights"]


def tree_weights(logprobs: np.ndarray, live: np.ndarray, params: SamplingParams) -> np.ndarray:
    """pi [W_in]: softmax(log p / T) over the trees ``live`` (bool [W_in]), 0 on the others."""
    z = np.where(live, np.asarray(logprobs, dtype=np.float64) / params.temperature, -np.inf)
    w = np.exp(z - z.max())
    return w / w.sum()


def allocate(logprobs: np.ndarray, params: SamplingParams, draft_beams: int, gamma: int,
             rng: np.random.Generator) -> np.ndarray:
    """[W_in, gamma] node counts per tree and layer: Multinomial(draft_beams, pi^(l)) per layer, or
    ``draft_beams`` everywhere when greedy (no draw)."""
    if draft_beams < 1 or gamma < 0:
        raise ValueError(f"a forest needs >= 1 draft beam per layer and >= 0 layers, got {draft_beams}, {gamma}")
    logprobs = np.asarray(logprobs, dtype=np.float64)
    counts = np.full((len(logprobs), gamma), draft_beams, dtype=np.int64)
    if params.greedy:
        return counts
    live = np.ones(len(logprobs), dtype=bool)
    for depth in range(gamma):
        counts[:, depth] = rng.multinomial(draft_beams, tree_weights(logprobs, live, params))
        live = counts[:, depth] > 0
    return counts


def combine(trees: Sequence[BeamTree], logprobs: np.ndarray, params: SamplingParams,
            rng: np.random.Generator) -> BeamDraft:
    """The forest of the trees (one per input beam, in beam order) for ``verify_beams``: per layer, the trees'
    nodes concatenated and, when sampling, shuffled by a permutation drawn from ``rng``, with parents
    renumbered to the layer above and q rows pi^(l)_b q_b^(l) (module docstring)."""
    logprobs = np.asarray(logprobs, dtype=np.float64)
    depths = {len(tree.layers) for tree in trees}
    if len(trees) != len(logprobs) or len(depths) > 1:
        raise ValueError(f"{len(logprobs)} input beams need as many trees of one depth, got {len(trees)} trees "
                         f"of depths {sorted(depths)}")
    gamma = depths.pop() if depths else 0
    where = [np.array([b]) for b in range(len(trees))]  # per tree: its nodes' indices in the layer above
    layers = []
    for depth in range(gamma):
        mine = [tree.layers[depth] for tree in trees]
        for b, (layer, above) in enumerate(zip(mine, where)):
            if len(layer.tokens) and not 0 <= layer.parents.min() <= layer.parents.max() < len(above):
                raise ValueError(f"tree {b}, layer {depth + 1}: a parent outside its {len(above)} nodes above")
        parents = np.concatenate([np.zeros(0, np.int64), *(above[layer.parents] for layer, above in zip(mine, where))])
        tokens = np.concatenate([np.zeros(0, np.int64), *(layer.tokens for layer in mine)])
        roots = np.repeat(np.arange(len(trees)), [len(layer.tokens) for layer in mine])
        if params.greedy:
            q, order = None, np.arange(len(tokens))
        else:
            q = _mixture(mine, where, tree_weights(logprobs, np.array([len(a) > 0 for a in where]), params))
            order = rng.permutation(len(tokens))
        layers.append(BeamLayer(parents[order], tokens[order], q, roots[order]))
        index = np.empty(len(order), dtype=np.int64)
        index[order] = np.arange(len(order))  # concatenated position -> index in the shuffled layer
        where = np.split(index, np.cumsum([len(layer.tokens) for layer in mine])[:-1])
    return BeamDraft(len(trees), tuple(layers), forwards=sum(tree.forwards for tree in trees))


def _mixture(layers: Sequence, where: Sequence[np.ndarray], pi: np.ndarray) -> np.ndarray:
    """q^(l) [n_{l-1}, V]: tree b's rows (its nodes of layer l-1) are pi_b q_b^(l)."""
    if any(layer.q is None for layer in layers):
        raise ValueError("a sampled tree layer must carry the q it was drawn from")
    q = np.zeros((sum(len(above) for above in where), layers[0].q.shape[-1]))
    for b, (layer, above) in enumerate(zip(layers, where)):
        if layer.q.shape != (len(above), q.shape[1]):
            raise ValueError(f"tree {b}: q is {layer.q.shape}, expected ({len(above)}, {q.shape[1]}): one row "
                             f"per node of its layer above")
        if len(above):
            q[above] = pi[b] * layer.drawn_from
    return q
