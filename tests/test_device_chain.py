"""Draft chains drawn where the draft model runs (runtime/backends/device_chain.py), tested on the CPU: the
same proposals as the host path (tokens, q, confidences, cache), the draft stream consumed the same way,
the torch sampling rules equal to sampling.py's, one copy to the host per draft, and a whole run lossless
with the path forced on (SPECSCHED_DEVICE_CHAINS=1). On CUDA it is the default; that test is marked."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from cli_runs import assert_one_error_line, specsched

from specsched.runtime.apps.run.app import run
from specsched.runtime.backends import device_chain
from specsched.runtime.backends import device_sampling as ds
from specsched.runtime.backends.backend import DraftedChain
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.backends.placement import Placement
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.sampling import SamplingParams, distribution, sample, stream
from specsched.workers.drafter import ChainDrafter, TreeDrafter
from tests.fp32 import assert_greedy_equal
from tests.test_device import needs_cuda
from tests.tiny_hf import logits_after, make_pair

PARAMS = [SamplingParams(), SamplingParams(temperature=0.8), SamplingParams(temperature=1.3, top_k=7),
          SamplingParams(temperature=0.9, top_p=0.6), SamplingParams(temperature=1.0, top_k=20, top_p=0.9)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def draft(pair):
    return HFModel(str(pair[1]), "fp32")


def drafters(model, params, prompt, *, lookup=0, k=5):
    """The same chain drafter twice, on the same draft stream: one to propose through forward() on the
    host, one to draw on the device (`propose` chooses the path)."""
    return [TreeDrafter(model, params, stream(7, 0, "draft", 0), prompt, k_config=(1,) * k, lookup=lookup)
            for _ in range(2)]


def propose(model, drafter, on_device, budget=99):
    model.draws_chains = on_device
    try:
        return drafter.propose(budget)
    finally:
        model.draws_chains = False


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("lookup", [0, 3])
def test_a_chain_drawn_on_the_device_is_the_host_paths_chain_round_after_round(draft, params, lookup):
    # a prompt that repeats itself, so the lookup proposes tokens (q = δ) as well as the model
    prompt = [5, 9, 12, 40, 5, 9, 12, 41, 5, 9, 12]
    host, dev = drafters(draft, params, prompt, lookup=lookup)
    for rnd in range(4):
        a, b = propose(draft, host, False), propose(draft, dev, True)
        assert a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()
        np.testing.assert_allclose(a.conf, b.conf, rtol=1e-5, atol=1e-7)
        if params.greedy:
            assert a.q is None and b.q is None
        else:
            assert len(b.q) == 5 and b.q.fits(draft.vocab_size) and b.q.dense.dtype == np.float32
            assert a.q.point.tolist() == b.q.point.tolist()  # the looked-up tokens are point masses on both
            np.testing.assert_allclose(a.q.dense, b.q.dense, atol=1e-6)
        assert host.base == dev.base and host.cache.tokens == dev.cache.tokens
        assert len(dev.cache.past.layers[0].keys[0, 0]) == len(dev.cache)  # keys and bookkeeping agree
        # a verdict: the first two accepted, then a correction the draft did not propose
        committed = [*a.tokens[:2].tolist(), (int(a.tokens[2]) + 1) % draft.vocab_size]
        for d in (host, dev):
            d.rng = stream(7, 0, "draft", rnd + 1)
            d.observe(committed, [0, 1])


def test_the_draft_stream_is_read_one_uniform_per_token_as_the_host_loop_reads_it():
    """The premise of taking a chain's uniforms up front: k at once are the k the host loop draws one by one."""
    at_once = stream(3, 1, "draft", 9).random(6)
    rng = stream(3, 1, "draft", 9)
    assert at_once.tolist() == [rng.random() for _ in range(6)]


@pytest.mark.parametrize("params", PARAMS[1:], ids=str)
def test_the_device_distribution_and_draw_follow_sampling_py(params):
    rng = np.random.default_rng(0)
    for trial in range(20):
        logits = rng.normal(0, 3, 300).astype(np.float32)
        if trial % 2:  # ties at the top-k boundary and inside the nucleus
            logits[rng.integers(0, 300, 40)] = logits.max()
        q = distribution(logits[None], params)[0]
        q_dev = ds.distribution(torch.from_numpy(logits), params)
        np.testing.assert_allclose(q_dev.numpy(), q, atol=1e-7)
        assert (q_dev.numpy() > 0).tolist() == (q > 0).tolist()  # the same tokens kept
        for u in rng.random(10):
            assert int(ds.draw(torch.from_numpy(q), torch.tensor(u, dtype=torch.float64))) == \
                sample(q, _Fixed(u))


def test_a_chain_leaves_the_device_in_one_copy_and_lookup_adds_one_per_drawn_token(draft, monkeypatch):
    copies = []
    real = draft.placement.down_all
    monkeypatch.setattr(draft.placement, "down_all", lambda *t: copies.append(len(t)) or real(*t))
    prompt = [3, 4, 5, 6]
    for lookup in (0, 3):
        copies.clear()
        _, dev = drafters(draft, SamplingParams(temperature=0.8), prompt, lookup=lookup, k=6)
        propose(draft, dev, True)
        if lookup == 0:
            assert copies == [3]  # tokens, confidences and q rows: one wait
        else:  # each model-drawn token id for the n-gram index, then the rest together
            assert copies[-1] == 3 and set(copies[:-1]) <= {1} and len(copies) <= 6


def test_a_budget_shorter_than_k_and_a_chain_of_one(draft):
    for budget in (1, 2):
        host, dev = drafters(draft, SamplingParams(temperature=0.7), [8, 9, 10], k=4)
        a, b = propose(draft, host, False, budget), propose(draft, dev, True, budget)
        assert a.tokens.tolist() == b.tokens.tolist() and len(b.tokens) == budget
        assert len(host.cache) == len(dev.cache)


def test_lookup_reads_the_ids_the_model_drew_on_the_device(draft):
    """The root's text is new, so the model draws the first token on the device; every (2, v) pair
    occurred earlier, so the lookup then proposes what followed 2 and the model's draw, which it can
    only know from the id brought to the host."""
    c, d = 2, 3
    prompt = [t for v in range(4, 96) for t in (c, v, 4 + (7 * v) % 90, 4 + v % 90)] + [d, c]
    for params in (SamplingParams(), SamplingParams(temperature=0.9)):
        host, dev = drafters(draft, params, prompt, lookup=3, k=4)
        a, b = propose(draft, host, False), propose(draft, dev, True)
        assert a.tokens.tolist() == b.tokens.tolist()
        first = int(a.tokens[0])
        assert int(a.tokens[1]) == 4 + (7 * first) % 90  # looked up after the model's own draw
        if not params.greedy:
            assert b.q.point.tolist()[:2] == [False, True]  # q = δ after a model token
            assert b.q.dense[0].max() < 1.0


def test_the_chain_drafter_takes_the_device_path_only_for_chains(draft, monkeypatch):
    called = []

    def chain(cache, tokens, plan):
        called.append(plan.k)
        return DraftedChain(np.zeros(plan.k, np.int32), None, np.ones(plan.k, np.float32))

    monkeypatch.setattr(draft, "draft_chain", chain)
    monkeypatch.setattr(draft, "draws_chains", True)
    TreeDrafter(draft, SamplingParams(), np.random.default_rng(0), [3, 4], k_config=(2, 1)).propose(9)
    TreeDrafter(draft, SamplingParams(), np.random.default_rng(0), [3, 4], k_config=(1, 1),
                min_confidence=0.5).propose(9)
    assert called == []  # trees and confidence-cut chains read every level on the host
    proposal = ChainDrafter(draft, SamplingParams(), np.random.default_rng(0), [3, 4], k=3).propose(9)
    assert called == [3] and proposal.parents.tolist() == [-1, 0, 1]


def test_a_setting_of_the_switch_that_is_no_choice_is_refused(monkeypatch):
    monkeypatch.setenv("SPECSCHED_DEVICE_CHAINS", "yes")
    with pytest.raises(ConfigError, match="SPECSCHED_DEVICE_CHAINS=yes: choose 0"):
        device_chain.wanted(False)
    for setting, cuda, want in (("", True, True), ("", False, False), ("0", True, False), ("1", False, True)):
        monkeypatch.setenv("SPECSCHED_DEVICE_CHAINS", setting)
        assert device_chain.wanted(cuda) is want


def test_the_engine_refuses_a_bad_switch_in_one_line_before_any_model_loads():
    # it was refused by each draft worker in turn, restarted until --max-restarts gave up: exit 1, 10 s
    env = {**os.environ, "SPECSCHED_DEVICE_CHAINS": "yes"}
    result = specsched("run", "--backend", "hf", "--target", "tiny", "--prompt", "x", "--max-new-tokens", "4", env=env)
    assert_one_error_line(result, 2, "SPECSCHED_DEVICE_CHAINS=yes: choose 0")


@pytest.mark.slow
def test_runs_with_chains_drawn_on_the_device_are_lossless_and_draw_what_the_host_path_draws(pair, monkeypatch):
    prompts = ["w1 w2 w3", "w5 w6 w5 w6 w5"]

    def tokens(**kw):
        record = run(RunConfig.of(backend="hf", target=str(pair[0]), draft=str(pair[1]), prompts=prompts,
                                  max_new_tokens=16, **kw))
        assert record.status == "ok", record.error
        return [s.tokens for s in record.sequences]

    ar = tokens(mode="ar")
    sampled = dict(mode="seed", temperature=0.9, top_p=0.9, seed=5)
    host = tokens(**sampled)
    monkeypatch.setenv("SPECSCHED_DEVICE_CHAINS", "1")  # every draft worker takes the device path
    for mode in ("seed", "sd"):
        assert_greedy_equal(tokens(mode=mode), ar, logits_after(pair[0], prompts), layers=2, width=128)
    assert tokens(**sampled) == host  # the same drafts, so the same verdicts and the same text


@needs_cuda
def test_on_cuda_a_chain_is_one_wait_and_the_host_paths_chain(pair):
    model = HFModel(str(pair[1]), "fp32", placement=Placement("cuda:0"))
    assert model.draws_chains
    host, dev = drafters(model, SamplingParams(temperature=0.8), [5, 9, 12, 40], k=6)
    a, waits = propose(model, host, False), model.placement.waits
    with warnings.catch_warnings(record=True) as warned:  # torch names each hidden wait (an .item(), ...)
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            b = propose(model, dev, True)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    ours = [w for w in warned if w.filename.endswith(("device_sampling.py", "device_chain.py"))]
    assert ours == [] and model.placement.waits == waits + 1  # the chain's own steps never wait
    assert a.tokens.tolist() == b.tokens.tolist()
    np.testing.assert_allclose(a.q.dense, b.q.dense, atol=1e-6)


class _Fixed:
    """An rng whose next uniform is u."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u
