"""Beam sampling's pieces on hand-checked values: p_beam and its warp over (beams x vocabulary), the
i.i.d. draw, deterministic beam search and its ties, the dynamic width of §3.2 (Eq. 2-7), the
memory-saving input, and the forest's shape checks.

The one statistical test (the draw) fails at p < 1e-4 with a fixed seed: reproducible, never flaky.
"""

from __future__ import annotations

import numpy as np
import pytest
from chi2 import chi2_goodness_of_fit

from specsched.runtime.core.beam_width import (
    DynamicWidth,
    acceptance_chain,
    accepted_count_law,
    dynamic_width,
    widest,
)
from specsched.runtime.core.beams import (
    BeamStep,
    beam_distribution,
    draw,
    joint_logprobs,
    log_softmax,
    lowest_perplexity,
    sample_step,
    search_step,
)
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_forest import DraftLayer, Forest, ForestVerdict, verify_forest

ALPHA = 1e-4

# two beams, joint p(beam) = 0.6, 0.4; next-token p(. | beam) over 3 tokens
BEAM_P = np.array([0.6, 0.4])
NEXT_P = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
JOINT = joint_logprobs(np.log(BEAM_P), np.log(NEXT_P))


def test_the_joint_adds_the_beam_and_next_token_log_probabilities():
    np.testing.assert_allclose(np.exp(JOINT), [[0.30, 0.18, 0.12], [0.04, 0.04, 0.32]])


def test_p_beam_at_temperature_one_is_the_normalised_joint():
    np.testing.assert_allclose(beam_distribution(JOINT, SamplingParams(1.0)), np.exp(JOINT), rtol=1e-6)
    # the beams' scale cancels in P: log-probabilities shifted by a constant give the same p_beam
    np.testing.assert_allclose(beam_distribution(JOINT - 7.0, SamplingParams(1.0)), np.exp(JOINT), rtol=1e-6)


def test_temperature_raises_the_joint_to_one_over_tau():
    powered = np.exp(JOINT) ** (1 / 0.5)
    np.testing.assert_allclose(beam_distribution(JOINT, SamplingParams(0.5)), powered / powered.sum(), rtol=1e-6)


def test_top_k_keeps_the_k_best_cells_over_all_beams_not_k_per_beam():
    # cells by joint: 0.32 (b1,t2), 0.30 (b0,t0), 0.18 (b0,t1), 0.12, 0.04, 0.04
    p = beam_distribution(JOINT, SamplingParams(1.0, top_k=3))
    np.testing.assert_allclose(p, np.array([[0.30, 0.18, 0], [0, 0, 0.32]]) / 0.80, rtol=1e-6)


def test_top_p_keeps_the_smallest_set_of_cells_reaching_the_mass():
    # mass before each cell in falling order: 0, 0.32, 0.62, 0.80 -> top_p = 0.7 keeps three cells
    p = beam_distribution(JOINT, SamplingParams(1.0, top_p=0.7))
    np.testing.assert_allclose(p, np.array([[0.30, 0.18, 0], [0, 0, 0.32]]) / 0.80, rtol=1e-6)


def test_temperature_zero_is_not_a_distribution():
    with pytest.raises(ValueError, match="search_step"):
        beam_distribution(JOINT, SamplingParams(0.0))


def test_log_softmax_rows_are_next_token_log_probabilities():
    np.testing.assert_allclose(np.exp(log_softmax(np.log(NEXT_P) + 3.0)), NEXT_P)


def test_draws_are_iid_from_the_distribution_and_never_hit_a_zero_cell():
    dist = 5.0 * np.array([[0.30, 0.18, 0.0], [0.04, 0.0, 0.48]])  # any positive scale
    parents, tokens = draw(dist, 20_000, np.random.default_rng(0))
    cells = (parents * 3 + tokens).tolist()
    flat = dist.ravel() / dist.sum()
    stat, dof, pvalue, impossible = chi2_goodness_of_fit(cells, dict(enumerate(flat)))
    assert not impossible
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


def test_a_sampled_step_keeps_duplicates_and_the_joint_of_each_beam():
    step = sample_step(JOINT, SamplingParams(0.3), 4, np.random.default_rng(1))  # peaked: repeats
    cells = list(zip(step.parents.tolist(), step.tokens.tolist()))
    assert len(set(cells)) < len(cells)
    np.testing.assert_allclose(step.logprobs, JOINT[step.parents, step.tokens])


def test_beam_search_keeps_the_best_cells_best_first_ties_to_the_lower_beam_then_token():
    joint = np.log(np.array([[0.1, 0.3, 0.3], [0.3, 0.05, 0.2]]))
    step = search_step(joint, 3)
    assert list(zip(step.parents.tolist(), step.tokens.tolist())) == [(0, 1), (0, 2), (1, 0)]
    greedy = sample_step(joint, SamplingParams(0.0), 3, np.random.default_rng(0))
    assert greedy.tokens.tolist() == step.tokens.tolist() and greedy.parents.tolist() == step.parents.tolist()


def test_the_memory_saving_input_is_the_most_likely_beam_ties_to_the_first():
    step = BeamStep(np.array([0, 1, 1]), np.array([4, 5, 6]), np.array([-2.0, -1.0, -1.0]))
    best = lowest_perplexity(step)
    assert (best.parents.tolist(), best.tokens.tolist(), best.logprobs.tolist()) == ([1], [5], [-1.0])


# -- dynamic width (Eq. 2-7), values worked by hand ---------------------------------------------------

def test_the_alpha_chain_follows_the_residual_after_each_rejection():
    # alpha_1 = sum min(p, q) = 0.2 + 0.3 + 0.1 = 0.6; residual max(p - q, 0) = (0.4, 0, 0) -> (1, 0, 0);
    # alpha_2 = min(1, 0.2) = 0.2, and the residual stays (1, 0, 0): alpha_3 = 0.2
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(acceptance_chain(p, q, 3), [0.6, 0.2, 0.2])
    # once the residual has no mass in q's support, no later draft can be accepted
    np.testing.assert_allclose(acceptance_chain(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 3), [0.5, 0, 0])
    np.testing.assert_allclose(acceptance_chain(q, q, 2), [1, 1])  # q == p: every draft is accepted


def test_the_accepted_count_law_of_eq_2():
    # alphas (0.6, 0.2): P~(1) = 0.6, P~(2) = 0.4 * 0.2 = 0.08; P(1, .) = (0.4, 0.6)
    # P(2, 0) = 0.4 * 0.8 = 0.32; P(2, 1) = 0.6 * 0.4 + 0.08 * 1 = 0.32; P(2, 2) = 0.6 * 0.6 = 0.36
    np.testing.assert_allclose(accepted_count_law(np.array([0.6, 0.2])), [0.32, 0.32, 0.36])
    # alphas (0.6, 0.2, 0.2): P~(3) = 0.4 * 0.8 * 0.2 = 0.064; P(3, 0) = 0.4 * 0.8 * 0.8 = 0.256
    # P(3, 1) = 0.6 P(2, 0) + 0.08 P(1, 0) + 0.064 = 0.192 + 0.032 + 0.064 = 0.288
    # P(3, 2) = 0.6 P(2, 1) + 0.08 P(1, 1) = 0.192 + 0.048 = 0.24;  P(3, 3) = 0.6 P(2, 2) = 0.216
    np.testing.assert_allclose(accepted_count_law(np.array([0.6, 0.2, 0.2])), [0.256, 0.288, 0.24, 0.216])
    np.testing.assert_allclose(accepted_count_law(np.ones(3)), [0, 0, 0, 1])
    np.testing.assert_allclose(accepted_count_law(np.zeros(0)), [1])


def test_the_width_is_the_largest_k_reached_with_probability_t_floored_at_w_min():
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
    # m = 2: P(>= 0, 1, 2) = 1, 0.68, 0.36
    assert widest(np.array([0.32, 0.32, 0.36]), 0.68) == 1
    assert [dynamic_width(p, q, 2, t, w_min=1) for t in (0.9, 0.68, 0.5, 0.36, 0.2)] == [1, 1, 1, 2, 2]
    assert dynamic_width(p, q, 2, 0.9, w_min=0) == 0
    assert dynamic_width(p, q, 2, 0.2, w_min=3) == 3
    # m = 3: P(>= 1, 2, 3) = 0.744, 0.456, 0.216
    assert [dynamic_width(p, q, 3, t, w_min=1) for t in (0.7, 0.45, 0.2)] == [1, 2, 3]
    assert dynamic_width(p, p, 4, 0.99, w_min=1) == 4  # a draft that agrees earns every beam it drew
    assert dynamic_width(p, q, 0, 0.5, w_min=2) == 2   # no drafts: W_min
    assert DynamicWidth(0.36, w_min=1).layer(p, q, 2) == 2


def test_a_width_rule_validates_itself():
    with pytest.raises(ValueError, match="threshold"):
        DynamicWidth(1.5)
    with pytest.raises(ValueError, match="widths"):
        DynamicWidth(0.5, w_min=0)


# -- the forest's shape and the verdict's paths -----------------------------------------------------

def _tiny_forest(q_rows: int = 2) -> Forest:
    after = np.log(np.full((3, 3), 1 / 3))
    layer = DraftLayer(np.array([0, 1, 1]), np.array([0, 2, 2]), np.full((q_rows, 3), 1 / 6), after)
    return Forest(np.log(BEAM_P), np.log(NEXT_P), (layer,))


def test_a_forest_with_a_q_of_the_wrong_shape_is_refused():
    _tiny_forest()
    with pytest.raises(ValueError, match="q is"):
        _tiny_forest(q_rows=3)


def test_a_dynamic_width_is_refused_at_temperature_zero():
    with pytest.raises(ValueError, match="fixed width"):
        verify_forest(_tiny_forest(), SamplingParams(0.0), DynamicWidth(0.5), np.random.default_rng(0))


def test_paths_follow_the_parents_back_to_the_input_beams():
    steps = (BeamStep(np.array([1, 0]), np.array([7, 8]), np.zeros(2)),
             BeamStep(np.array([1, 1, 0]), np.array([3, 4, 5]), np.zeros(3)))
    roots, tokens = ForestVerdict(steps, ()).paths()
    assert roots.tolist() == [0, 0, 1]
    assert tokens.tolist() == [[8, 3], [8, 4], [7, 5]]
