"""A feature draft's chains drawn over its own vocabulary (runtime/backends/feature_chain.py): the proposals
TreeDrafter's loop makes through V-wide rows - tokens, q, confidences, cache - round after round, greedy and
sampled, with lookup; a q over a support on the wire, refused when it does not fit, and accepted exactly as
its rows written out V wide; greedy runs through real processes equal target-only decoding."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import torch
from test_feature_draft import PROMPTS, SHAPE, _run, _tokens

from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import SamplingParams, distribution, draw, stream
from specsched.runtime.core.wire import unpack
from specsched.scheduler.acceptance import verify_tree
from specsched.workers.drafter import TreeDrafter
from tests.feature_drafts import feature_model
from tests.fp32 import assert_greedy_equal
from tests.tiny_hf import logits_after

PARAMS = [SamplingParams(), SamplingParams(temperature=0.8), SamplingParams(temperature=1.3, top_k=7),
          SamplingParams(temperature=0.9, top_p=0.6), SamplingParams(temperature=1.0, top_k=20, top_p=0.9),
          SamplingParams(temperature=1.0, top_k=60)]  # more than the draft's 48 ids, fewer than the target's 96


@pytest.fixture(scope="module")
def model(narrow_pair):
    return feature_model(narrow_pair)


def test_the_restricted_draft_is_what_the_chain_tests_need(model):
    assert len(model.support) < PARAMS[-1].top_k < model.vocab_size  # top-k 60 keeps every draft id
    assert model.order is not None and np.all(np.diff(model.support) > 0)  # its ids came in no order


def test_a_feature_draft_draws_its_chains_unless_told_to_take_the_host_loop(narrow_pair, monkeypatch):
    assert feature_model(narrow_pair).draws_chains
    monkeypatch.setenv("SPECSCHED_DEVICE_CHAINS", "0")
    assert not feature_model(narrow_pair).draws_chains


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("lookup", [0, 3])
def test_a_chain_drawn_over_the_drafts_vocabulary_is_the_loops_chain_round_after_round(model, params, lookup):
    rng = np.random.default_rng(1)
    prompt = [5, 9, 12, 40, 5, 9, 12, 41, 5, 9, 12]  # repeats itself: the lookup proposes tokens (q = δ) too
    truth = rng.standard_normal((200, model.hidden)).astype(np.float32)  # the target's features, stood in for
    loop, chain = (TreeDrafter(model, params, stream(7, 0, "draft", 0), prompt, k_config=(1,) * 5, lookup=lookup)
                   for _ in range(2))
    for rnd in range(4):
        for d in (loop, chain):
            held = d.features_held()
            d.take_features(held, truth[held:len(d.context) - 1])
        model.draws_chains = False
        a = loop.propose(99)
        model.draws_chains = True
        b = chain.propose(99)
        assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
        np.testing.assert_equal(loop.rng.bit_generator.state, chain.rng.bit_generator.state)  # the same uniforms
        np.testing.assert_allclose(a.conf, b.conf, rtol=1e-5, atol=1e-7)
        if params.greedy:
            assert a.q is None and b.q is None
        else:
            assert a.q.support is None and np.array_equal(b.q.support, model.support)
            assert b.q.dense.shape[1] == len(model.support) and a.q.point.tolist() == b.q.point.tolist()
            np.testing.assert_allclose(a.q.written_out(a.tokens, model.vocab_size),
                                       b.q.written_out(b.tokens, model.vocab_size), atol=1e-6)
        assert loop.base == chain.base and loop.cache.tokens == chain.cache.tokens
        assert loop.cache.true_in == chain.cache.true_in and len(chain.cache.outs) == len(chain.cache)
        # a verdict: the first two accepted, then a correction the draft did not propose
        committed = [*a.tokens[:2].tolist(), (int(a.tokens[2]) + 1) % model.vocab_size]
        for d in (loop, chain):
            d.rng = stream(7, 0, "draft", rnd + 1)
            d.observe(committed, [0, 1])


@pytest.mark.parametrize("params", PARAMS[1:] + [SamplingParams(temperature=3.0, top_p=0.95)], ids=str)
def test_over_4096_of_49152_ids_the_narrow_row_draws_what_the_wide_row_draws(params):
    """The shipped shape, numpy alone: 4,096 ids of 49,152, where top-p ranks through its 256-token head
    (sampling._kept_in_head) or, at a high temperature, by values."""
    rng = np.random.default_rng(3)
    ids = np.sort(rng.choice(49_152, 4096, replace=False)).astype(np.int32)
    for _ in range(20):
        narrow = rng.normal(0, 3, 4096).astype(np.float32)
        wide = np.full(49_152, -np.inf, np.float32)
        wide[ids] = narrow
        q_narrow, q_wide = distribution(narrow[None], params)[0], distribution(wide[None], params)[0]
        np.testing.assert_allclose(q_wide[ids], q_narrow, rtol=1e-6, atol=1e-9)
        assert not q_wide[np.setdiff1d(np.arange(49_152), ids)].any()
        for u in rng.random(50):
            assert ids[draw(q_narrow, u)] == draw(q_wide, u)
        assert ids[np.argmax(narrow)] == np.argmax(wide)


def test_a_draft_whose_vocabulary_repeats_an_id_is_refused_at_load(narrow_pair):
    from specsched.runtime.backends.feature import FeatureModel

    draft = feature_model(narrow_pair).draft
    draft.vocab_ids[1] = draft.vocab_ids[0]
    with pytest.raises(ValueError, match="not 48 distinct ids of the target's 96"):
        FeatureModel.of(draft)


# -- q over a support: the wire and the verifier ---------------------------------------------------------
def support_draft(rng: np.random.Generator, vocab: int, params: SamplingParams):
    """A tree of 1-7 candidates, each a point mass or drawn from a row over a random support; the target's
    logits at the root and after each node."""
    support = np.sort(rng.choice(vocab, int(rng.integers(1, vocab)), replace=False)).astype(np.int32)
    n = int(rng.integers(1, 8))
    parents = np.array([int(rng.integers(-1, i)) for i in range(n)], np.int32)
    tokens, rows = np.zeros(n, np.int32), []
    for i in range(n):
        row = None if rng.random() < 0.3 else distribution(rng.normal(0, 2, (1, len(support))), params)[0]
        tokens[i] = int(rng.integers(vocab)) if row is None else support[draw(row, rng.random())]
        rows.append(row)
    logits = rng.normal(0, 2.5, (n + 1, vocab)).astype(np.float32)
    return tokens, parents, DraftQ.of(rows, len(support), support), logits


def test_a_q_over_a_support_is_accepted_exactly_as_its_rows_written_out():
    params = [SamplingParams(1.0), SamplingParams(0.7, top_k=3), SamplingParams(1.3, top_p=0.8)]
    accepted = 0
    for seed in range(1500):
        rng = np.random.default_rng(seed)
        vocab, p = int(rng.integers(3, 14)), params[seed % len(params)]
        tokens, parents, q, logits = support_draft(rng, vocab, p)
        assert q.fits(vocab) and not q.fits(int(q.support[-1]))
        wide = DraftQ.rows(q.written_out(tokens, vocab))
        a, b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
        narrow = verify_tree(logits[0], logits[1:], tokens, parents, q, p, a)
        written = verify_tree(logits[0], logits[1:], tokens, parents, wide, p, b)
        assert (narrow.path, narrow.tokens) == (written.path, written.tokens)
        assert a.bit_generator.state == b.bit_generator.state
        accepted += len(narrow.path)
    assert accepted > 300  # acceptances taken (495 over these seeds), not only rejections


def test_a_q_over_a_support_crosses_the_wire_bit_for_bit_in_a_ninth_of_the_bytes():
    rng, support = np.random.default_rng(2), np.arange(0, 49_152, 12, dtype=np.int32)  # 4,096 ids of 49,152
    rows = rng.dirichlet(np.ones(len(support)), size=3).astype(np.float32)
    sent = Draft.chain(0, 0, 0, [12, 24, 36], q=DraftQ.of(list(rows), len(support), support))
    frames = sent.to_frames()
    got = Draft.from_message(unpack(frames))
    assert np.array_equal(got.q.support, support) and np.array_equal(got.q.dense.view(np.uint32), rows.view(np.uint32))
    layout = {name: shape for name, _, shape in msgpack.unpackb(frames[0])["arrays"]}
    assert layout == {"tokens": [3], "parents": [3], "q": [3, 4096], "support": [4096]}
    assert sum(len(f) for f in frames) * 8.5 < 3 * 49_152 * 4  # (3 rows + the ids) x 4,096 against 3 x 49,152


@pytest.mark.parametrize("support, why", [
    (np.array([3, 1, 5], np.int32), "increasing"),
    (np.array([1, 1, 5], np.int32), "increasing"),
    (np.array([-1, 1, 5], np.int32), ">= 0"),
    (np.array([1, 3], np.int32), "an id per column"),
    (np.array([1, 3, 5], np.int64), "expected int32"),
])
def test_a_support_that_does_not_fit_is_refused(support, why):
    with pytest.raises(ValueError, match=why):
        DraftQ(np.full((1, 3), 1 / 3, np.float32), np.array([False]), support)


def test_a_support_without_q_is_refused():
    with pytest.raises(ValueError, match="support but no q"):
        DraftQ.from_arrays({"support": np.array([1, 2], np.int32)})


# -- lossless runs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [dict(mode="seed"), dict(mode="seed", lookup=3, policy="batch", max_batch=0)])
def test_greedy_with_a_restricted_feature_draft_is_target_only_decoding(narrow_pair, settings):
    ar = _tokens(_run(narrow_pair, mode="ar"))
    record = _run(narrow_pair, **settings)
    assert_greedy_equal(_tokens(record), ar, logits_after(narrow_pair[0], PROMPTS), **SHAPE)
    assert record.collected.counters["drafted"] > 0


def test_a_sampled_run_with_a_restricted_feature_draft_drafts_and_is_accepted(narrow_pair):
    """Through real processes at T = 1 (the law itself: the chi-square test in test_feature_draft.py, slow)."""
    record = _run(narrow_pair, mode="seed", temperature=1.0, seed=1, max_new_tokens=24)
    counters = record.collected.counters
    assert counters["drafted"] > 0 and counters["accepted"] > 0


def test_a_sharper_draft_proposes_from_its_scaled_logits_and_greedy_is_unchanged(narrow_pair, sharp_pair):
    """sharpness β: the drafted q is softmax(β z / T), so its logits are β times the draft's own, the same argmax;
    the q a sampled chain sends is that softmax (what the verifier accepts against)."""
    plain, sharp = feature_model(narrow_pair), feature_model(sharp_pair)
    assert sharp.sharpness == 2.0 and plain.sharpness == 1.0
    truth = torch.from_numpy(np.random.default_rng(0).standard_normal((8, plain.hidden)).astype(np.float32))
    rows = []
    for m in (plain, sharp):
        cache = m.new_cache()
        m.take_features(cache, 0, truth.numpy())
        rows.append(m.narrow(cache, [5, 9, 12, 40, 5]))
    np.testing.assert_allclose(rows[1], 2.0 * rows[0], rtol=1e-6, atol=1e-6)
    assert np.argmax(rows[1]) == np.argmax(rows[0])
    params = SamplingParams(temperature=1.0)
    q = distribution(rows[1][None], params)[0]
    np.testing.assert_allclose(q, torch.softmax(torch.from_numpy(2.0 * rows[0]), -1).numpy(), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_sharpness_that_is_not_a_finite_positive_number_is_refused(value):
    from specsched.runtime.models.feature_draft import FeatureDraftConfig

    with pytest.raises(ValueError, match="sharpness"):
        FeatureDraftConfig(sharpness=value)


def test_a_sampled_run_with_a_sharper_draft_is_accepted_and_greedy_is_target_only_decoding(sharp_pair):
    record = _run(sharp_pair, mode="seed", temperature=1.0, seed=1, max_new_tokens=24)
    assert record.collected.counters["accepted"] > 0
    ar = _tokens(_run(sharp_pair, mode="ar"))
    assert_greedy_equal(_tokens(_run(sharp_pair, mode="seed")), ar, logits_after(sharp_pair[0], PROMPTS), **SHAPE)
