"""DSBD with real backend models (sim): the draft worker's forest, the verifier's batched forest forward and
the decoding loops, against references that use no cache, batching or tree (tests/beam_views.py).

Statistics. The beams after ``STEPS`` steps, as a multiset of token sequences, are tested with Pearson's
chi-square against the exact law of target-only beam sampling, enumerated as tests/beam_models.py does
(cells pooled to >= 5 expected, tests/chi2.py). A correct implementation fails each test with probability
about ALPHA = 1e-4 for a random seed; the seeds are fixed, so every run gives the same verdict. The same
samples must reject the law of the draft's own beam sampling at p < 1e-6: the sample size sees a departure
of the size a bypassed or mis-scaled verification would make.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from beam_models import beam_sampling_law, decode
from beam_views import AfterPrompt, assert_forest_read_as_plain_forwards, layout_case
from chi2 import chi2_goodness_of_fit
from helpers import draft_model, target_model

from specsched.runtime.core.beam_width import DynamicWidth
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_decode import beam_decode, dsbd_decode
from specsched.scheduler.beam_verify import verify_beams

ALPHA = 1e-4
POWER = 1e-6
GREEDY = SamplingParams(0.0)


def beam_search(model, prompt: list[int], width: int, steps: int) -> list[tuple[tuple[int, ...], float]]:
    """Plain beam search on exact next-token rows: the last step's (sequence, joint log-probability), best first."""
    view = AfterPrompt(model.logits_for, prompt, model.vocab_size)
    history, _ = decode(view, None, GREEDY, width=width, drafts=0, gamma=0, steps=steps,
                        rng=np.random.default_rng(0), ordered=True)
    return history[-1]


def rngs(seed: int, sequence: int = 0) -> dict:
    """The key of the streams (the verifier's and the drafts'), for a sequence numbered ``sequence``."""
    return {"seed": seed, "sequence": sequence}


# -- (a) temperature 0: DSBD is deterministic beam search ---------------------------------------------

VOCAB = 8
PROMPTS = [[1, 2, 3], [5], [7, 7, 4, 6]]
SEARCH_STEPS = 10


@pytest.mark.parametrize("agreement", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_greedy_dsbd_and_beam_decode_are_beam_search_token_for_token(agreement, width):
    target, draft = target_model(VOCAB), draft_model(VOCAB, agreement)
    accepted = np.zeros(4, dtype=int)
    for prompt in PROMPTS:
        want = beam_search(target, prompt, width, SEARCH_STEPS)
        dsbd = dsbd_decode(target, draft, prompt, GREEDY, width, beams=width + 1, gamma=3, steps=SEARCH_STEPS,
                           **rngs(0))
        for got in (beam_decode(target, prompt, GREEDY, width, SEARCH_STEPS), dsbd):
            assert got.tokens == [list(s) for s, _ in want]
            np.testing.assert_allclose(got.logprobs, [lp for _, lp in want], rtol=0, atol=1e-9)
        accepted += dsbd.stats.accept_counts
    if agreement == 1.0:
        assert accepted[1:].sum() > 0  # draft layers were taken...
    if agreement == 0.0:
        assert accepted[0] > 0         # ...and corrected


def test_a_greedy_draft_that_is_the_target_has_every_layer_accepted():
    """A target-only first step, then three iterations of gamma + 1 = 4 steps each."""
    target = target_model(VOCAB)
    out = dsbd_decode(target, draft_model(VOCAB, 1.0), PROMPTS[0], GREEDY, 2, beams=2, gamma=3, steps=13, **rngs(0))
    assert out.stats.accept_counts == (0, 0, 0, 3)
    assert (out.stats.steps, out.stats.target_forwards) == (13, 4)
    assert out.tokens == [list(s) for s, _ in beam_search(target, PROMPTS[0], 2, 13)]


# -- (b) sampling: DSBD's beams have the law of target-only beam sampling -------------------------------

LAW_VOCAB = 4
LAW_PROMPT = [1, 2]
WIDTH, DRAFTS, GAMMA, STEPS = 2, 3, 2, 3
RUNS = 4000
WARPS = [SamplingParams(1.0), SamplingParams(0.8, top_k=5)]


def exact_law(model, params: SamplingParams) -> dict:
    view = AfterPrompt(model.logits_for, LAW_PROMPT, LAW_VOCAB)
    return beam_sampling_law(view, params, WIDTH, STEPS)[-1]


def multiset(tokens: list[list[int]]) -> tuple:
    return tuple(sorted(tuple(t) for t in tokens))


def assert_law(samples: list, law: dict) -> None:
    stat, dof, pvalue, impossible = chi2_goodness_of_fit(samples, law)
    assert not impossible, f"beams the target cannot produce: {impossible}"
    assert dof >= 10
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


@pytest.mark.parametrize("params", [WARPS[0], pytest.param(WARPS[1], marks=pytest.mark.slow)], ids=str)
def test_dsbd_on_sim_models_decodes_as_target_only_beam_sampling(params):
    """W_S = 3 draft beams per layer, gamma = 2, W_L = 2: iterations emit 1 to 3 steps, are chained until at
    least 3 steps, and the beams after step 3 are reported. The top-k warp (25 s of CPU) runs with the slow
    tests, in CI."""
    target, draft = target_model(LAW_VOCAB), draft_model(LAW_VOCAB, 0.6)
    view = AfterPrompt(target.logits_for, LAW_PROMPT, LAW_VOCAB)
    samples, accepted, emitted = [], np.zeros(GAMMA + 1, dtype=int), Counter()
    for run in range(RUNS):
        out = dsbd_decode(target, draft, LAW_PROMPT, params, WIDTH, beams=DRAFTS, gamma=GAMMA, steps=STEPS,
                          **rngs(1, run))
        samples.append(multiset(out.tokens))
        accepted += out.stats.accept_counts
        emitted[out.stats.steps] += 1
        if run < 50:  # the joint log-probabilities reported are the target's
            np.testing.assert_allclose(out.logprobs, [view.logprob(tuple(t)) for t in out.tokens], atol=1e-9)
    assert np.all(accepted > 0)          # short first layers, short second layers and the bonus all happen
    assert set(emitted) - {STEPS}        # and the last iteration often goes past step 3: the truncation matters
    law = exact_law(target, params)
    assert_law(samples, law)
    draft_law = exact_law(draft, params)
    assert chi2_goodness_of_fit(samples, draft_law)[2] < POWER
    assert law != draft_law


@pytest.mark.parametrize("params", WARPS, ids=str)
def test_target_only_beam_decode_has_the_exact_beam_sampling_law(params):
    target = target_model(LAW_VOCAB)
    samples = [multiset(beam_decode(target, LAW_PROMPT, params, WIDTH, STEPS, **rngs(2, run)).tokens)
               for run in range(RUNS)]
    assert_law(samples, exact_law(target, params))


def test_a_dynamic_width_reports_the_targets_joint_of_every_beam():
    target, draft = target_model(VOCAB), draft_model(VOCAB, 0.8)
    view = AfterPrompt(target.logits_for, PROMPTS[0], VOCAB)
    widths = set()
    for seed in range(20):
        out = dsbd_decode(target, draft, PROMPTS[0], SamplingParams(1.0), DynamicWidth(0.3, w_min=1, bonus=2),
                          beams=4, gamma=3, steps=6, **rngs(seed))
        assert all(len(t) == 6 for t in out.tokens)
        np.testing.assert_allclose(out.logprobs, [view.logprob(tuple(t)) for t in out.tokens], atol=1e-9)
        widths.add(len(out.tokens))
    assert len(widths) > 1
    with pytest.raises(ValueError, match="fixed width"):
        dsbd_decode(target, draft, PROMPTS[0], GREEDY, DynamicWidth(0.3), beams=4, gamma=2, steps=3, **rngs(0))


# -- (c) the forest as the models read it ----------------------------------------------------------------

def test_the_verifier_reads_every_forest_node_as_a_plain_forward_would():
    assert_forest_read_as_plain_forwards(target_model(VOCAB), draft_model(VOCAB, 0.5), np.testing.assert_array_equal)


def test_after_a_verification_each_beam_has_its_own_cache_holding_a_prefix_of_it():
    target, draft = target_model(VOCAB), draft_model(VOCAB, 0.9)
    contexts, logprobs, caches, _, forest = layout_case(target, draft, SamplingParams(1.0), seed=4)
    out = verify_beams(target, caches, contexts, logprobs, forest, SamplingParams(1.0), 4, np.random.default_rng(4))
    assert len({id(c) for c in out.caches}) == len(out.caches) == 4
    for cache, ctx, root in zip(out.caches, out.contexts, out.roots):
        assert cache.linear
        if cache is caches[root]:  # its root's cache: the context and the accepted nodes, all but the last token
            assert cache.tokens == ctx[:-1]
        else:                      # another beam's, rolled back to that beam's context (sync_to crops it)
            assert cache.tokens in contexts or cache.tokens == []
    assert out.layers_accepted > 0 and any(cache is caches[r] for cache, r in zip(out.caches, out.roots))
