"""Tree drafts: the tree attention mask, lossless tree verification (greedy and sampled, with and
without replacement), and batched verification."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from chi2 import chi2_sf

from specsched.runtime.apps.run.app import run
from specsched.runtime.backends.backend import Cache
from specsched.runtime.backends.sim import SimModel
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.sampling import SamplingParams, distribution, stream
from specsched.scheduler.acceptance import verify_tree
from specsched.workers.drafter import TreeDrafter

# SEED Figure 6: k_config (2, 2, 1) in level order - two roots, two children each, one grandchild each.
FIG6_PARENTS = [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5]


def test_figure6_tree_mask_and_positions():
    cache = Cache()
    cache.append([7, 8, 9], None)                     # the committed prefix
    base = len(cache)
    cache.append(list(range(10, 20)), [base + p if p >= 0 else base - 1 for p in FIG6_PARENTS])
    mask = cache.visibility(base).astype(int)
    expected = np.array([
        # prefix | a0 a1 b0 b1 b2 b3 c0 c1 c2 c3
        [1, 1, 1,  1, 0, 0, 0, 0, 0, 0, 0, 0, 0],   # a0
        [1, 1, 1,  0, 1, 0, 0, 0, 0, 0, 0, 0, 0],   # a1
        [1, 1, 1,  1, 0, 1, 0, 0, 0, 0, 0, 0, 0],   # b0 under a0
        [1, 1, 1,  1, 0, 0, 1, 0, 0, 0, 0, 0, 0],   # b1 under a0
        [1, 1, 1,  0, 1, 0, 0, 1, 0, 0, 0, 0, 0],   # b2 under a1
        [1, 1, 1,  0, 1, 0, 0, 0, 1, 0, 0, 0, 0],   # b3 under a1
        [1, 1, 1,  1, 0, 1, 0, 0, 0, 1, 0, 0, 0],   # c0 under b0
        [1, 1, 1,  1, 0, 0, 1, 0, 0, 0, 1, 0, 0],   # c1 under b1
        [1, 1, 1,  0, 1, 0, 0, 1, 0, 0, 0, 1, 0],   # c2 under b2
        [1, 1, 1,  0, 1, 0, 0, 0, 1, 0, 0, 0, 1],   # c3 under b3
    ])
    np.testing.assert_array_equal(mask, expected)
    assert cache.positions[base:] == [3, 3, 4, 4, 4, 4, 5, 5, 5, 5]  # prefix length + depth


def _sim_pair(vocab: int, agreement: float):
    return (SimModel(vocab, 1234, 1.0, 0, draft=False), SimModel(vocab, 1234, agreement, 0, draft=True))


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("agreement", [0.3, 0.9])
def test_sampled_tree_verification_emits_the_target_distribution(replacement, agreement):
    """First emitted token after a fixed context, over N independent trials, against the exact p.

    Chi-square goodness of fit over the vocabulary (V - 1 degrees of freedom). Threshold: p-value
    1e-4, so this test fails by chance with probability 1e-4 per parametrisation; it is seeded, so
    a given checkout either always passes or always fails.
    """
    vocab, trials = 8, 4000
    params = SamplingParams(temperature=1.0)
    target, draft = _sim_pair(vocab, agreement)
    context = [3, 5]
    p = distribution(target.logits_for(context)[None], params)[0].astype(np.float64)
    counts = Counter()
    for trial in range(trials):
        drafter = TreeDrafter(draft, params, stream(trial, 0, "draft"), context, k_config=(3, 2, 1),
                              replacement=replacement)
        prop = drafter.propose(3)
        cache = target.new_cache()
        base = len(context)
        logits = target.forward(cache, context + prop.tokens.tolist(),
                                list(range(-1, base - 1)) + [base + q if q >= 0 else base - 1
                                                             for q in prop.parents])
        out = verify_tree(logits[base - 1], logits[base:], prop.tokens, prop.parents, prop.q, params,
                          stream(trial, 0, "verify"))
        counts[out.tokens[0]] += 1
    observed = np.array([counts[t] for t in range(vocab)], dtype=np.float64)
    expected = trials * p / p.sum()
    stat = float(((observed - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, vocab - 1) > 1e-4, (observed, expected)


def _tokens(record):
    assert record.status == "ok", record.error
    return [s.tokens for s in record.sequences]


@pytest.mark.parametrize("k_config", [[1, 1, 1], [2, 2, 1], [4, 2, 1, 1]])
@pytest.mark.parametrize("policy", ["fcfs", "batch"])
def test_greedy_trees_and_batching_match_target_only_on_sim(k_config, policy):
    kw = dict(backend="sim", workers=4, max_new_tokens=24, sim_draft_ms=1, sim_verify_ms=3,
              prompts=["kaka lomi", "nene ruru sasa", "toto", "vivi bebe"])
    ar = _tokens(run(RunConfig.of(mode="ar", **kw)))
    # --lockstep for batch: the first step holds all four workers' drafts, so a batch is certain rather
    # than a matter of drafts happening to arrive together
    seed = run(RunConfig.of(mode="seed", policy=policy, k_config=k_config, max_batch=0, lockstep=policy == "batch",
                            **kw))
    assert _tokens(seed) == ar
    counters = seed.collected.counters
    if policy == "batch":  # the batch really happened: fewer target forwards than drafts
        assert counters["batched_drafts"] > counters["verifications"]
    else:
        assert counters["batched_drafts"] == counters["verifications"]


def test_wider_trees_accept_more_tokens_per_verification():
    kw = dict(backend="sim", workers=3, max_new_tokens=48, sim_draft_ms=0, sim_verify_ms=1, sim_agreement=0.6,
              mode="sd")
    chain = run(RunConfig.of(k_config=[1, 1, 1], **kw)).metrics.mean_tokens_per_verify
    tree = run(RunConfig.of(k_config=[2, 2, 1], **kw)).metrics.mean_tokens_per_verify
    wide = run(RunConfig.of(k_config=[4, 2, 1], **kw)).metrics.mean_tokens_per_verify
    assert chain < tree < wide


def test_sampled_batched_verification_matches_unbatched_on_sim():
    # sim logits do not depend on batch shape, so even sampled outputs are identical
    kw = dict(backend="sim", workers=4, max_new_tokens=20, sim_draft_ms=1, sim_verify_ms=3, temperature=0.9, seed=11,
              k_config=[2, 2, 1])
    batched = run(RunConfig.of(policy="batch", max_batch=0, lockstep=True, **kw))  # --lockstep: a batch is certain
    assert _tokens(batched) == _tokens(run(RunConfig.of(**kw)))
    assert batched.collected.counters["batched_drafts"] > batched.collected.counters["verifications"]
