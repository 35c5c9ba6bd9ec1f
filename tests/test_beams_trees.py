"""DSBD with one draft process per input beam (scheduler/beam_allocation.py): the verifier's node counts, each
beam's own tree, the forest they combine into, and the tree's wire form.

Statistics. A forest built the per-tree way is verified by the real verifier (sim models, one batched target
forward per forest) and the multiset of the first step's W_L beams is tested with Pearson's chi-square
against Multinomial(W_L, p_beam) (tests/chi2.py; cells pooled to >= 5 expected). A correct implementation
fails each test with probability about ALPHA = 1e-4 for a random seed; the seeds are fixed, so every run
gives the same verdict. The same check, at the same sample size, must reject (p < 1e-6) the two shortcuts
the mixture argument rules out: trees concatenated without the shuffle, and fixed counts per tree instead of
multinomial ones. The default run checks the law at T = 1; the top-p warp and the two power checks (about a
minute of CPU between them) run with the slow tests, in CI.
"""

from __future__ import annotations

import numpy as np
import pytest
from beam_models import multinomial_law
from chi2 import chi2_goodness_of_fit
from helpers import draft_model, target_model

from specsched.runtime.core.beam_trees import BeamDraft, BeamLayer, BeamTree, TreeLayer
from specsched.runtime.core.beams import beam_distribution, beam_stream, joint_logprobs, log_softmax
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_allocation import allocate, combine, tree_weights
from specsched.scheduler.beam_verify import verify_beams
from specsched.workers.beam_drafter import draft_tree

ALPHA = 1e-4
POWER = 1e-6
GREEDY = SamplingParams(0.0)

VOCAB = 6
CONTEXTS = [[1, 2], [3], [2, 4, 5]]       # three input beams whose next-token laws differ
LOGPROBS = np.array([-0.2, -1.5, -0.9])   # and whose trees get unequal shares: pi = (0.57, 0.15, 0.28) at T = 1
DRAFTS, WIDTH = 4, 2                      # W_S, W_L
TRIALS = 6000
WARPS = [SamplingParams(1.0), SamplingParams(0.8, top_p=0.8)]  # top-p cuts each tree's cells and p_beam's


def p_beam(target, params: SamplingParams) -> np.ndarray:
    rows = np.stack([target.logits_for(c) for c in CONTEXTS])
    return beam_distribution(joint_logprobs(LOGPROBS, log_softmax(rows)), params)


def first_steps(params: SamplingParams, seed: int, *, counts=None, in_tree_order: bool = False) -> list[tuple]:
    """Per trial: allocate, draft each tree from its own stream, combine, verify; the sorted cells of step 1.
    ``counts`` replaces the multinomial allocation; ``in_tree_order`` undoes the shuffle."""
    target, draft = target_model(VOCAB), draft_model(VOCAB, 0.9)
    drafts = [draft.new_cache() for _ in CONTEXTS]
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(TRIALS):
        n = allocate(LOGPROBS, params, DRAFTS, 1, rng) if counts is None else counts
        trees = [draft_tree(draft, cache, ctx, lp, params, n[s], beam_stream(seed, trial, s, 1))
                 for s, (cache, ctx, lp) in enumerate(zip(drafts, CONTEXTS, LOGPROBS))]
        forest = combine(trees, LOGPROBS, params, rng)
        if in_tree_order:
            forest = tree_order(forest)
        caches = [target.new_cache() for _ in CONTEXTS]
        step = verify_beams(target, caches, CONTEXTS, LOGPROBS, forest, params, WIDTH, rng).steps[0]
        out.append(tuple(sorted((step.parents * VOCAB + step.tokens).tolist())))
    return out


def tree_order(forest: BeamDraft) -> BeamDraft:
    """A one-layer forest with its nodes grouped by tree (tree 0's first), as a concatenation without the shuffle
    would leave them (within a tree, the shuffled order is still an i.i.d. order)."""
    (layer,) = forest.layers
    order = np.argsort(layer.roots, kind="stable")
    return BeamDraft(forest.width_in, (BeamLayer(layer.parents[order], layer.tokens[order], layer.q,
                                                 layer.roots[order]),), forest.forwards)


def chi2_first_step(samples: list[tuple], params: SamplingParams) -> tuple[float, int, float, dict]:
    return chi2_goodness_of_fit(samples, multinomial_law(p_beam(target_model(VOCAB), params).ravel(), WIDTH))


# -- (1) one per-tree forest: the first step is Multinomial(W_L, p_beam) ----------------------------------------

@pytest.mark.parametrize("params", [WARPS[0], pytest.param(WARPS[1], marks=pytest.mark.slow)], ids=str)
def test_a_forest_of_separately_drafted_trees_steps_as_beam_sampling(params):
    stat, dof, pvalue, impossible = chi2_first_step(first_steps(params, seed=1), params)
    assert not impossible, f"beams the target cannot produce: {impossible}"
    assert dof >= 10
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


# -- (2) power: the shuffle and the multinomial counts are both needed ------------------------------------------

@pytest.mark.slow
def test_the_check_rejects_trees_concatenated_without_the_shuffle():
    """Tree 0's nodes are tried first: the first accepted beams come from tree 0 far more often than pi_0."""
    params = WARPS[0]
    assert chi2_first_step(first_steps(params, seed=1, in_tree_order=True), params)[2] < POWER


@pytest.mark.slow
def test_the_check_rejects_fixed_counts_per_tree():
    """Counts N pi rounded, (2, 1, 1), every time: tree 1 always drafts one of the four beams, where the q the
    verifier divides by gives it 15 %."""
    params = WARPS[0]
    fixed = np.round(DRAFTS * tree_weights(LOGPROBS, np.ones(3, dtype=bool), params)).astype(int)[:, None]
    assert fixed.ravel().tolist() == [2, 1, 1]
    assert chi2_first_step(first_steps(params, seed=1, counts=fixed), params)[2] < POWER


# -- allocation and combination, exactly --------------------------------------------------------------------------

def test_counts_are_multinomial_per_layer_over_the_trees_that_reach_it():
    rng, params = np.random.default_rng(0), SamplingParams(1.0)
    logprobs = np.array([0.0, -6.0, -0.5, -9.0])  # trees 1 and 3 are rarely given a node
    for _ in range(200):
        counts = allocate(logprobs, params, 3, 4, rng)
        assert counts.shape == (4, 4) and np.all(counts.sum(axis=0) == 3)
        assert np.all(counts[:, 1:][counts[:, :-1] == 0] == 0)  # no node below a tree's empty layer
    first = np.array([allocate(logprobs, params, 3, 1, rng)[:, 0] for _ in range(2000)]).sum(axis=0)
    np.testing.assert_allclose(first / first.sum(), tree_weights(logprobs, np.ones(4, dtype=bool), params), atol=0.02)
    np.testing.assert_array_equal(allocate(logprobs, GREEDY, 3, 2, rng), np.full((4, 2), 3))


def trees_case(params: SamplingParams, seed: int = 5, gamma: int = 3):
    """Three trees drafted from their counts, the first draft cache holding a stale tail before."""
    draft = draft_model(VOCAB, 0.5)
    counts = allocate(LOGPROBS, params, DRAFTS, gamma, np.random.default_rng(seed))
    caches = [draft.new_cache() for _ in CONTEXTS]
    draft.forward(caches[0], [1, 2, 0, 3])
    trees = [draft_tree(draft, cache, ctx, lp, params, n, beam_stream(seed, 0, s, 1))
             for s, (cache, ctx, lp, n) in enumerate(zip(caches, CONTEXTS, LOGPROBS, counts))]
    return draft, counts, caches, trees


def paths(tree: BeamTree) -> list[list[tuple[int, ...]]]:
    """Per layer, in the tree's order, each node's tokens from the input beam down."""
    above, out = [()], []
    for layer in tree.layers:
        above = [above[p] + (int(t),) for p, t in zip(layer.parents, layer.tokens)]
        out.append(above)
    return out


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.8, top_p=0.8), GREEDY], ids=str)
def test_the_forest_holds_each_tree_under_its_input_beam_and_the_mixture_of_their_qs(params):
    draft, counts, caches, trees = trees_case(params)
    assert [c.tokens for c in caches] == CONTEXTS  # every draft cache holds exactly its context again
    np.testing.assert_array_equal(np.stack([t.sizes for t in trees]), counts)
    if not params.greedy:  # a tree stops while others go on: a layer's pi is over fewer trees than the last's
        assert np.any((counts[:, :-1] > 0) & (counts[:, 1:] == 0))
    forest = combine(trees, LOGPROBS, params, np.random.default_rng(6))
    own = [[[()], *paths(t)] for t in trees]  # per tree, per layer from 0 (the input beam): node paths
    above = [((), b) for b in range(len(trees))]  # the forest's layer above: (path, input beam) per node
    for depth, layer in enumerate(forest.layers):
        if params.greedy:
            assert layer.q is None and np.array_equal(layer.roots, np.sort(layer.roots))  # tree order kept
        else:  # a node of tree b above has pi_b times its row of q_b (a duplicate's is equal), wherever it is
            pi = tree_weights(LOGPROBS, np.array([len(own[b][depth]) > 0 for b in range(len(trees))]), params)
            for row, (path, b) in zip(layer.q, above):
                np.testing.assert_array_equal(row, pi[b] * trees[b].layers[depth].drawn_from[own[b][depth].index(path)])
        above = [(above[p][0] + (int(t),), above[p][1]) for p, t in zip(layer.parents, layer.tokens)]
        assert [b for _, b in above] == layer.roots.tolist()  # a node grows from its parent's input beam
        for b in range(len(trees)):  # and the forest's nodes of tree b are the tree's, shuffled
            assert sorted(path for path, root in above if root == b) == sorted(own[b][depth + 1])


def test_a_tree_that_draws_no_node_still_brings_the_q_its_beam_is_weighted_with():
    params = SamplingParams(1.0)
    draft = draft_model(VOCAB, 0.5)
    tree = draft_tree(draft, draft.new_cache(), CONTEXTS[1], LOGPROBS[1], params, [0, 0],
                      np.random.default_rng(0))
    assert tree.sizes.tolist() == [0, 0] and tree.forwards == 1
    assert tree.layers[0].q.shape == (1, VOCAB) and tree.layers[1].q.shape == (0, VOCAB)


def test_a_sampled_tree_is_drawn_from_the_float32_q_it_sends():
    _, _, _, trees = trees_case(SamplingParams(0.8, top_p=0.8))
    for tree in trees:
        for layer in tree.layers:
            np.testing.assert_array_equal(layer.q, layer.q.astype(np.float32))  # what travels, exactly
            if len(layer.tokens):
                assert np.all(layer.drawn_from[layer.parents, layer.tokens] > 0)


def test_greedy_trees_keep_their_own_best_cells():
    """Layer 1 of every tree is its W_S best first tokens: together they hold the draft's joint top W_S."""
    draft, counts, _, trees = trees_case(GREEDY, gamma=2)
    assert np.all(counts == DRAFTS)
    joint = joint_logprobs(LOGPROBS, log_softmax(np.stack([draft.logits_for(c) for c in CONTEXTS])))
    joint_best = {divmod(int(c), VOCAB) for c in np.argsort(-joint, axis=None, kind="stable")[:DRAFTS]}
    per_tree = {(b, int(t)) for b, tree in enumerate(trees) for t in tree.layers[0].tokens}
    assert joint_best <= per_tree
    for b, tree in enumerate(trees):
        assert tree.layers[0].tokens.tolist() == np.argsort(-joint[b], kind="stable")[:DRAFTS].tolist()


# -- (5) the wire form ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params", [SamplingParams(1.0), GREEDY], ids=str)
def test_a_tree_survives_its_wire_form_exactly(params):
    _, _, _, trees = trees_case(params)
    empty = draft_tree(draft_model(VOCAB, 0.5), draft_model(VOCAB, 0.5).new_cache(), CONTEXTS[0], -1.0, params,
                       [0, 0, 0], np.random.default_rng(0))
    for tree in [*trees, empty]:
        tokens, parents, sizes, q_rows = arrays = tree.to_arrays()
        assert (q_rows is None) == params.greedy and (q_rows is None or q_rows.dtype == np.float32)
        back = BeamTree.from_arrays(*arrays, forwards=tree.forwards)
        assert back.forwards == tree.forwards and len(back.layers) == len(tree.layers) == 3
        for a, b in zip(tree.layers, back.layers):
            np.testing.assert_array_equal(a.parents, b.parents)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            assert (a.q is None and b.q is None) or (np.array_equal(a.q, b.q) and b.q.dtype == np.float64)
            assert a.q is None or np.array_equal(a.drawn_from, b.drawn_from)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for depth in range(1, len(sizes)):  # read order: a parent sits in the layer above
            mine = parents[starts[depth]:starts[depth + 1]]
            assert np.all((starts[depth - 1] <= mine) & (mine < starts[depth]))
        assert np.all(parents[:sizes[0]] == -1)


def test_arrays_that_do_not_form_a_tree_are_refused():
    tree = BeamTree((TreeLayer(np.array([0, 0]), np.array([3, 4]), np.full((1, 5), 0.2)),
                     TreeLayer(np.array([1]), np.array([2]), np.full((2, 5), 0.1))))
    tokens, parents, sizes, q_rows = tree.to_arrays()
    assert parents.tolist() == [-1, -1, 1] and sizes.tolist() == [2, 1] and q_rows.shape == (3, 5)
    BeamTree.from_arrays(tokens, parents, sizes, q_rows)  # the control case
    no_mass = q_rows.copy()
    no_mass[0, 3] = 0  # the first node's cell
    for bad in [(tokens[:2], parents, sizes, q_rows),              # fewer tokens than the layers hold
                (tokens, np.array([-1, -1, 2]), sizes, q_rows),   # a parent in its own layer
                (tokens, np.array([-1, 0, 1]), sizes, q_rows),    # a layer-1 node below another
                (tokens, parents, sizes, q_rows[:2]),             # a q row missing
                (tokens, parents, sizes, no_mass),                # a node where its q is 0
                (tokens, parents, sizes, -q_rows),                # a negative q
                (np.array([3, 4, 7]), parents, sizes, q_rows),   # a token outside the vocabulary
                (tokens, parents, np.array([2, -1, 1]), q_rows)]:
        with pytest.raises(ValueError):
            BeamTree.from_arrays(*bad)
