"""n-gram lookup in the drafters (--lookup): what it proposes, with which q, and that greedy stays exact."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import outputs, run_ok, sim_config, words

from specsched.runtime.config import ConfigError, RunConfig
from specsched.runtime.sampling import SamplingParams
from specsched.workers.drafter import TreeDrafter
from specsched.workers.lookup import NgramIndex
from specsched.workers.sim import SimModel


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
    if not greedy:
        assert np.array_equal(proposal.q[0], np.eye(16, dtype=np.float32)[5])  # q = δ, the verifier's ratio
    plain = TreeDrafter(model, params, np.random.default_rng(0), prompt, k_config=(1, 1, 1)).propose(3)
    assert plain.q is None or not np.isclose(plain.q.max(axis=-1), 1).all()


def test_greedy_output_with_lookup_equals_target_only_decoding():
    prompts = [words(64, [i, i + 1, i + 2, i, i + 1, i + 2, i]) for i in range(3)]
    kw = dict(workers=3, prompts=prompts, max_new_tokens=40, k=4, sim_agreement=0.3)
    ar = run_ok(sim_config(mode="ar", **kw))
    for lookup in (2, 4):
        seed = run_ok(sim_config(mode="seed", lookup=lookup, **kw))
        assert outputs(seed) == outputs(ar)


def test_lookup_must_be_off_or_at_least_two():
    with pytest.raises(ConfigError, match="--lookup"):
        RunConfig(backend="sim", lookup=1)
