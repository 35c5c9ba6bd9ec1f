"""n-gram lookup in the drafters (--lookup): what it proposes, with which q, and that greedy stays exact."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import outputs, run_ok, sim_config, words

from specsched.runtime.backends.sim import SimModel
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import SamplingParams
from specsched.workers.drafter import TreeDrafter
from specsched.workers.lookup import NgramIndex


def test_the_index_answers_with_the_follower_of_the_latest_longest_match():
    idx = NgramIndex(3)
    idx.extend([5, 6, 7, 1, 9, 6, 7, 2, 6, 7])
    assert idx.lookup([6, 7]) == 2  # latest occurrence of (6, 7) was followed by 2
    assert idx.lookup([5, 6, 7]) == 1  # the 3-gram match wins over the later 2-gram one
    assert idx.lookup([4, 4]) is None and idx.lookup([7]) is None  # no match; 1-grams are never used
    idx.extend([8])
    assert idx.lookup([6, 7]) == 8


@pytest.mark.parametrize("greedy", [True, False])
def test_a_repeated_ngram_is_drafted_with_probability_one(greedy):
    model = SimModel(16, seed=0, agreement=0.0, cost_ms=0, draft=True)
    params = SamplingParams(0.0 if greedy else 1.0)
    prompt = [3, 4, 5, 9, 3, 4]  # "3 4" was followed by 5
    drafter = TreeDrafter(model, params, np.random.default_rng(0), prompt, k_config=(1, 1, 1), lookup=3)
    proposal = drafter.propose(3)
    assert proposal.tokens[0] == 5 and proposal.tokens[1] == 9  # "4 5" -> 9, then "5 9" -> 3
    assert proposal.tokens[2] == 3
    if not greedy:  # q = δ at each: three point masses, no dense row
        assert proposal.q.point.tolist() == [True, True, True] and proposal.q.dense.shape == (0, 16)
        assert np.array_equal(proposal.q.written_out(proposal.tokens, 16)[0], np.eye(16, dtype=np.float32)[5])
    plain = TreeDrafter(model, params, np.random.default_rng(0), prompt, k_config=(1, 1, 1)).propose(3)
    assert plain.q is None or (not plain.q.point.any() and not np.isclose(plain.q.dense.max(axis=-1), 1).all())


def frame_bytes(proposal) -> list[int]:
    """The sizes of the frames of the draft a worker sends for `proposal` (header first)."""
    draft = Draft(0, 0, 0, proposal.tokens, proposal.parents, proposal.q, lanes=proposal.lanes)
    return [len(memoryview(f)) for f in draft.to_frames()]


def test_a_sampled_draft_of_looked_up_tokens_sends_no_vocabulary_wide_row():
    vocab = 4096  # a dense q row is 16 KiB here
    model = SimModel(vocab, seed=0, agreement=0.0, cost_ms=0, draft=True)
    looked_up = TreeDrafter(model, SamplingParams(1.0), np.random.default_rng(0), [3, 4, 5, 9, 3, 4],
                            k_config=(1, 1, 1), lookup=3).propose(3)
    assert looked_up.q.point.all() and sum(frame_bytes(looked_up)) < 400  # three tokens' worth: no q row
    drawn = TreeDrafter(model, SamplingParams(1.0), np.random.default_rng(0), [3, 4, 5, 9, 3, 4],
                        k_config=(1, 1, 1)).propose(3)  # the model's three tokens: a row each
    assert not drawn.q.point.any() and max(frame_bytes(drawn)) == 3 * 4 * vocab


def test_greedy_output_with_lookup_equals_target_only_decoding():
    prompts = [words(64, [i, i + 1, i + 2, i, i + 1, i + 2, i]) for i in range(3)]
    kw = dict(workers=3, prompts=prompts, max_new_tokens=40, k=4, sim_agreement=0.3)
    ar = run_ok(sim_config(mode="ar", **kw))
    for lookup in (2, 4):
        seed = run_ok(sim_config(mode="seed", lookup=lookup, **kw))
        assert outputs(seed) == outputs(ar)


def test_lookup_must_be_off_or_at_least_two():
    with pytest.raises(ConfigError, match="--lookup"):
        RunConfig.of(backend="sim", lookup=1)


def test_lookup_is_on_for_real_models_and_off_for_the_sim_by_default():
    assert RunConfig(backend="hf").draft_lookup == 4
    assert RunConfig(backend="sim").draft_lookup == 0  # 64 synthetic tokens repeat every n-gram
    assert RunConfig.of(backend="hf", lookup=0).draft_lookup == 0
    assert RunConfig.of(backend="sim", lookup=3).draft_lookup == 3


def test_in_a_tree_only_nodes_with_a_match_lose_their_siblings():
    model = SimModel(16, seed=0, agreement=0.0, cost_ms=0, draft=True)
    prompt = [3, 4, 5, 9, 3, 4]  # root: "3 4" -> 5 (one candidate); under it "4 5" -> 9, "5 9" -> 3 ...
    drafter = TreeDrafter(model, SamplingParams(0.0), np.random.default_rng(0), prompt, k_config=(2, 3), lookup=2)
    proposal = drafter.propose(2)
    assert list(proposal.tokens[:2]) == [5, 9] and list(proposal.parents[:2]) == [-1, 0]
    # "5 9" was followed by 3 in the prompt -> a match again; a node without a match keeps width 3:
    fresh = TreeDrafter(model, SamplingParams(0.0), np.random.default_rng(0), [1, 2, 6, 7], k_config=(1, 3),
                        lookup=2)
    assert len(fresh.propose(2).tokens) == 1 + 3  # nothing repeats: the model's top-1, then its top-3


def test_greedy_trees_with_lookup_equal_target_only_decoding():
    prompts = [words(64, [i, i + 1, i + 2, i, i + 1, i + 2, i]) for i in range(3)]
    kw = dict(workers=3, prompts=prompts, max_new_tokens=30, sim_agreement=0.3)
    ar = run_ok(sim_config(mode="ar", **kw))
    tree = run_ok(sim_config(mode="seed", lookup=3, k_config=[2, 2, 1], max_batch=0, policy="batch", **kw))
    assert outputs(tree) == outputs(ar)


def test_min_confidence_shortens_drafts_but_never_below_one_token():
    model = SimModel(16, seed=0, agreement=0.5, cost_ms=0, draft=True)
    prompt = [1, 2, 6, 7]

    def drafted(min_confidence: float) -> int:
        drafter = TreeDrafter(model, SamplingParams(0.0), np.random.default_rng(0), prompt, k_config=(1, 1, 1, 1),
                              min_confidence=min_confidence)
        return len(drafter.propose(4).tokens)

    assert drafted(0.0) == 4
    assert drafted(0.999) == 1  # the first token is always drafted: a round always has something to verify
    kw = dict(workers=2, prompts=[words(64, [3, 9, 27]), words(64, [5, 7])], max_new_tokens=30, sim_agreement=0.5)
    ar = run_ok(sim_config(mode="ar", **kw))
    assert outputs(run_ok(sim_config(mode="seed", min_confidence=0.3, **kw))) == outputs(ar)
    with pytest.raises(ConfigError, match="--min-confidence"):
        RunConfig.of(backend="sim", min_confidence=1.0)


def test_greedy_top_tokens_match_a_stable_sort_of_the_whole_vocabulary():
    from specsched.workers.drafter import top_tokens

    rng = np.random.default_rng(1)
    for trial in range(50):
        logits = rng.integers(-3, 3, size=40).astype(np.float32)  # many ties
        logits[rng.integers(0, 40, size=10)] = -np.inf  # a restricted draft vocabulary
        for width in (1, 2, 3, 7, 40):
            expected = np.argsort(-logits, kind="stable")[:width]
            assert list(top_tokens(logits, width)) == list(expected), (trial, width)
