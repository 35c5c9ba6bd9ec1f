"""Sampling, in process: the shaping of p and q, the greedy rule, and the exactness of speculative
sampling (every emitted token is distributed as the target's p, whatever the draft's q).

Statistical tests use Pearson's chi-square against exact probabilities with a fixed seed. Cells are
pooled until each expects at least 5 draws (the approximation's usual validity condition). We fail
when p < 1e-4: a correct implementation would fail for a random seed with probability about 1e-4,
and since the seed is fixed the outcome is reproducible - never flaky. The companion "power" tests
show that the same check, with the same sample size, does reject a sampler that is wrong.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from chi2 import chi2_goodness_of_fit, chi2_sf, markov_chi2
from helpers import draft_model, outcome_probabilities, sim_config, target_model, transition_table
from loopback_decode import decode_in_process

from specsched.runtime.backends.sim import EOS
from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.sampling import SamplingParams, distribution, sample, stream
from specsched.scheduler.acceptance import next_token, verify_chain

ALPHA = 1e-4  # false-failure probability of each statistical test (see the module docstring)


# -- p and q are shaped by the same temperature / top-k / top-p ----------------------------------

def test_temperature_divides_the_logits_before_the_softmax():
    logits = np.array([[2.0, 1.0, 0.0, -1.0]])
    for t in (0.5, 1.0, 2.0):
        e = np.exp(logits[0] / t)
        np.testing.assert_allclose(distribution(logits, SamplingParams(t))[0], e / e.sum(), rtol=1e-6)


def test_top_k_keeps_the_k_most_likely_tokens_renormalised():
    logits = np.array([[0.0, 3.0, 1.0, 2.0, -1.0]])
    p = distribution(logits, SamplingParams(1.0, top_k=2))[0]
    e = np.exp([3.0, 2.0])
    np.testing.assert_allclose(p, [0, e[0] / e.sum(), 0, e[1] / e.sum(), 0], rtol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_the_mass_and_always_the_top_token():
    logits = np.log(np.array([[0.1, 0.5, 0.3, 0.1]]))
    # sorted: 0.5, 0.3, 0.1, 0.1 -> mass before each: 0, 0.5, 0.8, 0.9
    np.testing.assert_allclose(distribution(logits, SamplingParams(1.0, top_p=0.5))[0], [0, 1, 0, 0], atol=1e-7)
    np.testing.assert_allclose(distribution(logits, SamplingParams(1.0, top_p=0.75))[0],
                               [0, 0.625, 0.375, 0], rtol=1e-6)
    np.testing.assert_allclose(distribution(logits, SamplingParams(1.0, top_p=0.01))[0], [0, 1, 0, 0], atol=1e-7)


def _nucleus_by_full_sort(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The definition, written as a stable sort of the whole vocabulary (the reference)."""
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    keep_sorted = np.cumsum(sorted_p, axis=-1) - sorted_p < top_p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.7, 0.9, 0.999, 0.99999])
def test_top_p_over_a_real_vocabulary_equals_the_full_sort_bit_for_bit(top_p):
    """The nucleus ranks only a few hundred candidates when they settle top_p, else sorts the values alone:
    same kept set, same renormalisation, including ties at the boundary (lower id first), flat rows and
    peaked ones; the values' way is held to the definition on every row, not only on wide nuclei."""
    from specsched.runtime.core.sampling import kept_by_values, nucleus

    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(49152) * s for s in (0.5, 2.0, 6.0)]        # flat to peaked
    tied = np.round(rng.standard_normal(49152) * 3, 1)                       # many exact ties
    rows += [tied, np.zeros(49152), np.r_[np.full(300, 2.0), np.zeros(48852)]]  # ties at the cut
    probs_rows = [np.exp(z - z.max()) for z in rows]
    # 100 distinct heads (mass 0.5), then 300 exact ties (mass 0.4) at scattered ids: the candidate
    # cut falls inside the ties, and top_p 0.7 reaches into them - only the lowest tied ids may be kept
    split = np.full(49152, 0.1 / 48752)
    ids = rng.permutation(49152)
    split[ids[:100]] = rng.dirichlet(np.ones(100)) * 0.5
    split[ids[100:400]] = 0.4 / 300
    probs_rows.append(split)
    for probs in probs_rows:
        probs = probs / probs.sum()
        want = _nucleus_by_full_sort(probs[None], top_p)
        assert np.array_equal(nucleus(probs[None], top_p), want)
        assert np.array_equal(kept_by_values(probs, top_p), want[0] > 0)
        assert np.array_equal(nucleus(np.stack([probs, probs[::-1]]), top_p)[1],
                              _nucleus_by_full_sort(probs[::-1][None], top_p)[0])


def test_bad_sampling_parameters_are_refused():
    for kw in ({"temperature": -1}, {"top_k": -1}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            SamplingParams(**{"temperature": 1.0, **kw})


def test_per_sequence_streams_are_reproducible_and_distinct():
    a = stream(3, 5, "draft").random(4)
    assert np.array_equal(a, stream(3, 5, "draft").random(4))
    for other in (stream(3, 6, "draft"), stream(3, 5, "verify"), stream(4, 5, "draft")):
        assert not np.array_equal(a, other.random(4))


# -- greedy -----------------------------------------------------------------------------------------

def one_hot_rows(best: list[int], vocab: int = 10) -> np.ndarray:
    rows = np.zeros((len(best), vocab), np.float32)
    rows[np.arange(len(best)), best] = 5.0
    return rows


@pytest.mark.parametrize("draft, best, tokens, accepted", [
    ([4, 5, 6], [4, 5, 6, 7], [4, 5, 6, 7], 3),   # all accepted, then the bonus token
    ([4, 5, 6], [4, 9, 6, 7], [4, 9], 1),         # first mismatch: the target's token replaces it
    ([4, 5, 6], [1, 5, 6, 7], [1], 0),            # nothing accepted
    ([], [8], [8], 0),                             # empty draft: just the target's token
])
def test_greedy_accepts_the_longest_matching_prefix_then_the_targets_token(draft, best, tokens, accepted):
    out = verify_chain(one_hot_rows(best), np.array(draft, np.int32), None, SamplingParams(0.0), stream(0, 0, "verify"))
    assert out.tokens == tokens and out.accepted == accepted and out.path == list(range(accepted))
    assert not out.resampled


# -- speculative sampling: the first emitted token is distributed as p ------------------------------

PARAMS = [
    SamplingParams(1.0),
    SamplingParams(0.6),
    SamplingParams(1.5, top_k=4),
    SamplingParams(1.0, top_p=0.8),
    SamplingParams(0.8, top_k=5, top_p=0.9),
]


def fixed_pair(params: SamplingParams, seed: int):
    """Target logits (k + 1 rows) and the draft's q (k rows) for a context-free 7-token toy model."""
    rng = np.random.default_rng(seed)
    vocab, k = 7, 3
    target_logits = rng.normal(0, 1.5, (k + 1, vocab)).astype(np.float32)
    q = distribution(rng.normal(0, 1.5, (k, vocab)).astype(np.float32), params)
    p = distribution(target_logits[:1], params)[0].astype(np.float64)
    return target_logits, q, p / p.sum()


def first_token_samples(params: SamplingParams, trials: int, seed: int):
    """Draw a draft from q, verify it, keep the first emitted token; return p and those tokens."""
    target_logits, q, p = fixed_pair(params, seed)
    rng = np.random.default_rng(seed + 1000)
    out = []
    for _ in range(trials):
        draft = np.array([sample(row, rng) for row in q], np.int32)
        out.append(verify_chain(target_logits, draft, DraftQ.rows(q), params, rng).tokens[0])
    return p, out


FIRST_TOKEN_TRIALS = 4000


@pytest.mark.parametrize("params", PARAMS, ids=str)
def test_the_first_emitted_token_follows_the_target_distribution(params):
    p, out = first_token_samples(params, trials=FIRST_TOKEN_TRIALS, seed=1)
    stat, dof, pvalue, impossible = chi2_goodness_of_fit(out, dict(enumerate(p)))
    assert not impossible, f"tokens outside the top-k/top-p support came out: {impossible}"
    assert dof >= 2
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


def test_the_first_token_check_rejects_a_residual_drawn_from_p_instead_of_p_minus_q():
    """Power: a classic bug resamples from p after a rejection; its law is min(p, q) + (1 - sum min) p."""
    params = SamplingParams(1.0)
    _, q_rows, p = fixed_pair(params, seed=1)
    q = q_rows[0].astype(np.float64) / q_rows[0].sum()
    overlap = np.minimum(p, q)
    buggy = overlap + (1 - overlap.sum()) * p
    out = np.random.default_rng(0).choice(7, size=FIRST_TOKEN_TRIALS, p=buggy)
    *_, pvalue, _ = chi2_goodness_of_fit(out.tolist(), dict(enumerate(p)))
    assert pvalue < ALPHA


def test_rejections_resample_and_accepts_do_not():
    rng = np.random.default_rng(2)
    logits = rng.normal(0, 2, (3, 6)).astype(np.float32)
    q = distribution(rng.normal(0, 2, (2, 6)).astype(np.float32), SamplingParams(1.0))
    kinds = Counter()
    for _ in range(300):
        draft = np.array([sample(row, rng) for row in q], np.int32)
        out = verify_chain(logits, draft, DraftQ.rows(q), SamplingParams(1.0), rng)
        assert out.tokens[:out.accepted] == draft[:out.accepted].tolist()
        assert len(out.tokens) == out.accepted + 1
        kinds[(out.accepted, out.resampled)] += 1
        assert out.resampled == (out.accepted < 2)
    assert {a for a, _ in kinds} == {0, 1, 2}  # every outcome happens with these logits


def test_a_sampled_draft_without_q_is_an_error():
    with pytest.raises(ValueError, match="q"):
        verify_chain(np.zeros((2, 4), np.float32), np.array([1], np.int32), None, SamplingParams(1.0),
                     stream(0, 0, "verify"))


# -- whole sequences, in process: real drafter, real Verifier, exact joint law ---------------------

JOINT_CASES = [
    (0.5, SamplingParams(1.3, top_k=5)),
    (0.9, SamplingParams(0.9, top_p=0.9)),
]
PROMPT = [3, 5]
JOINT_SEQUENCES = 1200


@pytest.mark.parametrize("agreement, params", JOINT_CASES, ids=lambda x: str(x))
def test_whole_short_sequences_follow_the_exact_joint_target_distribution(agreement, params):
    config = sim_config(sim_vocab=8, sim_agreement=agreement, temperature=params.temperature,
                        top_k=params.top_k, top_p=params.top_p, max_new_tokens=3, k=2, seed=3)
    samples = [tuple(decode_in_process(config, PROMPT, seq)) for seq in range(JOINT_SEQUENCES)]
    exact = outcome_probabilities(target_model(8), PROMPT, 3, params)
    stat, dof, pvalue, impossible = chi2_goodness_of_fit(samples, exact)
    assert not impossible, f"impossible outputs: {impossible}"
    assert dof >= 10
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


def test_the_joint_check_rejects_a_sampler_that_skips_the_correction():
    """Power: outputs drawn from the draft model (what accepting every draft token would give)."""
    params = SamplingParams(1.3, top_k=5)
    exact = outcome_probabilities(target_model(8), PROMPT, 3, params)
    wrong = outcome_probabilities(draft_model(8, 0.5), PROMPT, 3, params)
    outcomes = list(wrong)
    rng = np.random.default_rng(0)
    drawn = rng.choice(len(outcomes), size=JOINT_SEQUENCES, p=np.array([wrong[o] for o in outcomes]))
    *_, pvalue, _ = chi2_goodness_of_fit([outcomes[i] for i in drawn], exact)
    assert pvalue < ALPHA


def test_target_only_sampling_draws_from_p_and_greedy_takes_the_argmax():
    row = np.array([0.0, 2.0, 1.0, -1.0], np.float32)
    assert next_token(row, SamplingParams(0.0), stream(0, 0, "target")) == 1
    rng = stream(0, 0, "target")
    out = [next_token(row, SamplingParams(1.0), rng) for _ in range(4000)]
    p = distribution(row[None], SamplingParams(1.0))[0].astype(np.float64)
    *_, pvalue, _ = chi2_goodness_of_fit(out, dict(enumerate(p / p.sum())))
    assert pvalue > ALPHA


def test_eos_ends_a_sequence_in_process():
    config = sim_config(sim_vocab=8, temperature=1.0, max_new_tokens=60, k=3, seed=0)
    lengths = [decode_in_process(config, PROMPT, seq) for seq in range(20)]
    ended = [s for s in lengths if s[-1] == EOS]
    assert ended and all(EOS not in s[:-1] for s in lengths)
    assert all(len(s) == 60 for s in lengths if s[-1] != EOS)


def test_chi2_survival_function_matches_known_values():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-9)
    assert chi2_sf(10.0, 2) == pytest.approx(np.exp(-5.0), rel=1e-12)  # dof 2 is exponential
    assert chi2_sf(124.342, 100) == pytest.approx(0.05, rel=1e-3)
    assert chi2_sf(0.0, 5) == 1.0


def test_the_markov_check_rejects_chains_drawn_from_the_draft_model():
    """Power of the runtime test (test_sampling_runtime.py), at its sample size: chains of 16
    workers drawn from the draft model's transitions, as if no draft token were ever corrected."""
    params = SamplingParams(1.5, top_k=5, top_p=0.9)
    p_table = transition_table(target_model(8), 8, params)
    q_table = transition_table(draft_model(8, 0.5), 8, params)
    rng = np.random.default_rng(0)
    starts = [[1 + i % 7, 1 + (3 * i + 1) % 7] for i in range(16)]
    chains = []
    for start in starts:
        context, out = list(start), []
        while len(out) < 400 and (not out or out[-1] != EOS):
            out.append(int(rng.choice(8, p=q_table[(context[-2], context[-1])])))
            context.append(out[-1])
        chains.append(out)
    stat, dof, pvalue, draws, impossible = markov_chi2(chains, starts, p_table)
    assert impossible or pvalue < ALPHA
