"""The draft side of DSBD: one input beam's tree of ``gamma`` layers, drafted by that beam's own process.

The verifier fixes every tree's node count per layer before drafting (scheduler/beam_allocation.py) and
combines the trees into the forest it verifies; this module drafts one tree from its counts, with no sight
of the other trees.

The draft's score. Tree b grows from input beam b (layer 0, one node). Its score is

    s(b) = log p_target(input beam b),    s(child of node a, token v) = s(a) + log q(v | a),

the target's joint log-probability of the input beam (handed out with the beams) continued by the draft's
next-token log-probabilities. Layer l of the tree is n_b^(l) i.i.d. draws from

    q_b^(l) = T o (exp s / sum exp s)  over (tree b's layer l-1 nodes) x V,

warped as p_beam is (``beam_distribution``) but over this tree's cells only (s(b) is a constant shift
there, so it cancels). The warped table is rounded to float32, the form it travels in, and both the draw
and the verifier use its float64 renormalisation (runtime/core/sampling.py's convention), so the q the
nodes were drawn from is exactly the q they are verified against. The tree carries q_b^(l) for every layer
whose layer above is non-empty (layer 1 always), even where it drew no node: the verifier's mixture needs
the rows of every node above.

Greedy (temperature 0): layer l is the tree's n_b^(l) cells of largest score (a beam search over this
tree alone), recorded with q = None.

The tree's forms on the wire and in the verifier (``BeamTree``, ``BeamDraft``) are runtime/core/beam_trees.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel
from ..runtime.core.beam_trees import NO_NODES, BeamTree, TreeLayer
from ..runtime.core.beams import draw, joint_logprobs, log_softmax, search_step
from ..runtime.core.sampling import SamplingParams, distribution

__all__ = ["draft_tree"]


def draft_tree(draft: LanguageModel, cache: Cache, context: Sequence[int], logprob: float,
               params: SamplingParams, counts: Sequence[int], rng: np.random.Generator) -> BeamTree:
    """Draft input beam ``context``'s tree: ``counts[l]`` nodes in layer l + 1 (the verifier's allocation),
    drawn from ``rng``. One draft forward for the context, then one per non-empty layer but the last. The
    cache is left holding exactly the context."""
    counts = [int(n) for n in counts]
    after = log_softmax(draft.root_row(cache, list(context))[None])  # [nodes above, V]: draft log q(. | node)
    score, forwards, layers, tree_len = np.array([float(logprob)]), 1, [], 0
    for depth, n in enumerate(counts):
        if len(score) == 0:  # nothing above: no cells, no q
            layers.append(TreeLayer(NO_NODES, NO_NODES, None if params.greedy else np.zeros((0, draft.vocab_size))))
            continue
        joint = joint_logprobs(score, after)  # s(a, v) = s(a) + log q(v | a)
        if not params.greedy:
            q = distribution(joint.reshape(-1), params).astype(np.float64).reshape(joint.shape)
            parents, tokens = draw(q / q.sum(), n, rng)
        elif n:
            q, best = None, search_step(joint, n)
            parents, tokens = best.parents, best.tokens
        else:
            q, parents, tokens = None, NO_NODES, NO_NODES
        layer = TreeLayer(parents.astype(np.int64), tokens.astype(np.int64), q)
        layers.append(layer)
        score = joint[parents, tokens]
        if n and depth + 1 < len(counts):
            # tree position j sits at cache index len(context) + j; the input beam is the context's last token
            above = len(context) - 1 if depth == 0 else len(context) + tree_len - len(layers[-2].tokens)
            after = log_softmax(draft.forward(cache, layer.tokens.tolist(), (above + layer.parents).tolist()))
            forwards += 1
        tree_len += n
    draft.crop(cache, len(context))
    return BeamTree(tuple(layers), forwards)
