"""The feature draft (EAGLE-style): the target's features on the wire, the draft's cache, and lossless runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specsched.runtime.apps.run.app import run
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft, Verdict
from specsched.runtime.core.wire import ProtocolError, unpack
from tests.feature_drafts import feature_model as _model
from tests.fp32 import assert_greedy_equal
from tests.tiny_hf import logits_after

PROMPTS = ["w1 w2 w3", "w5 w6", "w7 w8 w9 w10 w11"]
SHAPE = dict(layers=2, width=128)


@pytest.fixture(scope="module")
def ar(pair):
    return _tokens(_run(pair, mode="ar"))


def _run(pair, **kw):
    kw.setdefault("max_new_tokens", 16)
    kw.setdefault("prompts", PROMPTS)
    record = run(RunConfig.of(backend="hf", target=str(pair[0]), draft=str(pair[1]), **kw))
    assert record.status == "ok", record.error
    return record


def _tokens(record):
    return [s.tokens for s in record.sequences]


# -- the draft's cache -------------------------------------------------------------------------------
@pytest.mark.parametrize("drafts", ["pair", "pair2"])
def test_reading_in_pieces_or_as_a_tree_gives_the_rows_of_one_plain_read(drafts, request):
    model = _model(request.getfixturevalue(drafts))
    model.lean = None  # the fp32 module: exact up to float rounding (the int8 path is tested below)
    rng = np.random.default_rng(0)
    seq = rng.integers(2, 96, 12).tolist()
    truth = rng.standard_normal((11, model.hidden)).astype(np.float32)

    def fresh():
        cache = model.new_cache()
        model.take_features(cache, 0, truth)
        return cache

    whole = model.forward(fresh(), seq)
    pieces = fresh()
    split = np.concatenate([model.forward(pieces, seq[:7]), model.forward(pieces, seq[7:])])
    finite = np.isfinite(whole)
    np.testing.assert_allclose(split[finite], whole[finite], atol=1e-4)
    # drafted tokens read the parent's predicted feature: as a chain, or as siblings in one tree level
    chain, tree = fresh(), fresh()
    model.forward(chain, seq[:7])
    model.forward(tree, seq[:7])
    first = model.forward(chain, [seq[7]], [6])
    second = model.forward(chain, [seq[8]], [7])
    level = model.forward(tree, [seq[7], 5], [6, 6])
    below = model.forward(tree, [9, seq[8]], [8, 7])
    np.testing.assert_allclose(level[0][finite[0]], first[0][finite[0]], atol=1e-4)
    np.testing.assert_allclose(below[1][finite[0]], second[0][finite[0]], atol=1e-4)
    # a drafted entry read a prediction, not the target's feature: accepted, it is read again
    model.keep(tree, [*range(7), 7, 10])
    assert model.sync_to(tree, seq[:10]) == seq[7:10] and len(tree) == 7
    # ... and the rolled-back cache (every layer's keys and values) reads on as the plain read did
    again = model.forward(tree, seq[7:10])
    np.testing.assert_allclose(again[finite[:3]], whole[7:10][finite[:3]], atol=1e-4)


def test_without_the_contexts_features_the_draft_waits(pair):
    model = _model(pair)
    cache = model.new_cache()
    assert not model.can_draft(cache, [3, 4, 5])
    model.take_features(cache, 0, np.zeros((2, model.hidden), np.float32))
    assert model.can_draft(cache, [3, 4, 5]) and model.features_held(cache) == 2


# -- the verifier's side -----------------------------------------------------------------------------
def test_the_features_a_sequence_keeps_are_a_fresh_forwards_hidden_states(pair):
    from specsched.runtime.backends.hf_model import HFModel
    from specsched.runtime.core.sampling import SamplingParams
    from specsched.scheduler.features import attach, keep_features
    from specsched.scheduler.jobs import SequenceState
    from specsched.scheduler.layout import lay_out, settle

    target = HFModel(str(pair[0]), "fp32")
    target.want_features = True
    st = SequenceState(0, 0, 0, [4, 5, 6, 7], target.new_cache(), held=0)
    drafts = [([9, 10, 11], [-1, 0, 0]), ([], []), ([12, 13], [-1, 0])]  # a tree, nothing, a chain
    for tokens, parents in drafts:
        tokens, parents = np.asarray(tokens, np.int32), np.asarray(parents, np.int32)
        layout = lay_out(target, st.cache, st.context, tokens, parents)
        rows = target.forward(st.cache, layout.tokens, layout.parents, first_row=layout.first_row)
        outcome = settle(target, st.cache, layout, rows, tokens, parents, None, SamplingParams(0.0),
                         np.random.default_rng(0))
        keep_features(target, st, layout, target.features[0], outcome.path)
        st.generated += outcome.tokens
    decoder = target.model.get_decoder()
    with torch.inference_mode():
        fresh = decoder(input_ids=torch.tensor([st.context[:-1]])).last_hidden_state[0].numpy()
    assert st.features.shape == fresh.shape and st.features.dtype == np.float16
    np.testing.assert_allclose(st.features.astype(np.float32), fresh, atol=2e-3, rtol=2e-3)
    st.held = 3
    verdict = attach(Verdict(0, 0, 0, np.zeros(1, np.int32), np.zeros(0, np.int32)), st)
    assert verdict.features_from == 3 and len(verdict.features) == len(fresh) - 3


def test_features_and_held_cross_the_wire_and_a_bad_held_is_refused():
    rows = np.arange(12, dtype=np.float16).reshape(3, 4)
    v = Verdict(1, 2, 0, np.asarray([5], np.int32), np.zeros(0, np.int32), features=rows, features_from=7)
    back = Verdict.from_message(unpack(v.to_frames()))
    assert back.features_from == 7 and back.features.dtype == np.float16
    np.testing.assert_array_equal(back.features, rows)
    d = Draft.chain(1, 0, 0, [3, 4], held=9)
    assert Draft.from_message(unpack(d.to_frames())).held == 9
    assert Draft.from_message(unpack(Draft.chain(1, 0, 0, [3]).to_frames())).held == -1
    for bad in (-2, 1.5, "3", True):
        frames = Draft.chain(1, 0, 0, [3], held=0).to_frames()
        msg = unpack(frames)
        msg.fields["held"] = bad
        with pytest.raises(ProtocolError):
            Draft.from_message(msg)


# -- lossless runs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [
    dict(mode="seed"),
    dict(mode="sd"),
    dict(mode="seed", k_config=[2, 2, 1], policy="batch", max_batch=0, lockstep=True),
    dict(mode="seed", tree="pct"),
])
def test_greedy_with_the_feature_draft_is_target_only_decoding(pair, ar, settings):
    record = _run(pair, **settings)
    assert_greedy_equal(_tokens(record), ar, logits_after(pair[0], PROMPTS), **SHAPE)
    counters = record.collected.counters
    assert counters["drafted"] > 0 and counters["accepted"] > 0  # it drafted, and the target agreed at times


@pytest.mark.parametrize("settings", [dict(mode="seed"), dict(mode="seed", tree="pct", policy="batch", max_batch=0)])
def test_greedy_with_a_two_layer_feature_draft_is_target_only_decoding(pair2, ar, settings):
    record = _run(pair2, **settings)
    assert_greedy_equal(_tokens(record), ar, logits_after(pair2[0], PROMPTS), **SHAPE)
    counters = record.collected.counters
    assert counters["drafted"] > 0 and counters["accepted"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("drafts", ["pair", "narrow_pair", "sharp_pair"])
def test_sampled_output_with_the_feature_draft_follows_the_targets_law(drafts, request):
    """400 sequences of three tokens at T = 1, top-k 4, one prompt: their joint law p(a) p(b | a) p(c | a b)
    (up to 64 outcomes; a text ends early at EOS) is known exactly from the target's fp32 logits. The first
    token is the target's alone (a feature draft's first draft is empty), the next two pass through
    speculative sampling on the feature draft's q (narrow_pair: a q over half the vocabulary, sent over its
    support; the target's other tokens can only come from the residual; sharp_pair: that q sharpened by β = 2,
    so a verifier that recomputed q unscaled would accept against the wrong one). Pearson's chi-square over cells
    pooled to >= 5 expected draws; the test fails below p = 1e-4, so a correct sampler fails one run in 10,000,
    while one that keeps the draft's q instead of p moves these cells far outside it (the control: a colder
    target's law is rejected by the same draws)."""
    from specsched.runtime.engine.engine import Engine
    from tests.chi2 import chi2_goodness_of_fit

    pair = request.getfixturevalue(drafts)
    n, k, workers = 400, 4, 8
    after = logits_after(pair[0], [PROMPTS[0]])

    def law(prefix, temperature):
        logits = after(0, prefix).astype(np.float64)
        top = np.argsort(logits)[-k:]
        w = np.exp((logits[top] - logits[top].max()) / temperature)
        return dict(zip(top.tolist(), (w / w.sum()).tolist()))

    def joint(temperature, prefix=(), p=1.0, out=None):  # a text ends at EOS (id 1) or after three tokens
        out = {} if out is None else out
        for t, pt in law(list(prefix), temperature).items():
            if t == 1 or len(prefix) == 2:
                out[(*prefix, t)] = p * pt
            else:
                joint(temperature, (*prefix, t), p * pt, out)
        return out

    config = RunConfig.of(backend="hf", target=str(pair[0]), draft=str(pair[1]), prompts=[PROMPTS[0]],
                          workers=workers, max_new_tokens=3, temperature=1.0, top_k=k, lookup=0)
    samples, drafted = [], 0
    with Engine(config) as e:
        for seed in range(n // workers):
            record = e.generate([PROMPTS[0]], seed=seed)
            assert record.status == "ok", record.error
            samples += [tuple(t[:3]) for t in _tokens(record)]
            drafted += record.collected.counters["drafted"]
    assert drafted >= sum(len(t) > 1 for t in samples)  # every text past one token went through the draft
    stat, dof, p, impossible = chi2_goodness_of_fit(samples, joint(1.0))
    assert not impossible and p > 1e-4, (stat, dof, p)
    assert chi2_goodness_of_fit(samples, joint(0.6))[2] < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["draft", "verifier"])
def test_after_kill_9_of_a_worker_or_the_verifier_the_feature_draft_goes_on_and_the_output_is_ar(pair, victim):
    """A restarted worker holds no features: its first draft is empty and the verdict brings every row of the
    verified prefix. A restarted verifier reads each context anew, and so has every row again."""
    import random
    import time

    from specsched.runtime.engine.engine import Engine
    from tests.process_watch import kill_one

    tokens = 120
    config = RunConfig.of(backend="hf", target=str(pair[0]), draft=str(pair[1]), max_new_tokens=tokens,
                          max_restarts=100, restart_period_s=1)
    rng, kills, killed = random.Random(1), 0, set()
    with Engine(config) as e:
        reference = _tokens(e.generate(PROMPTS, mode="ar"))
        job = e.submit(PROMPTS, mode="seed")
        deadline = time.monotonic() + 120
        while kills < 2 and time.monotonic() < deadline and not job.done():
            time.sleep(0.3)
            rows = [p for p in e.processes if p["role"] == victim and p["pid"] not in killed
                    and p["state"] in ("drafting", "ready") and job.collected.tokens]
            if rows:
                kills += kill_one(rows, rng, killed)
        record = job.result(timeout=180)
    assert record.status == "ok", record.error
    assert kills >= 1 and len(record.collected.restarts) >= 1
    assert_greedy_equal(_tokens(record), reference, logits_after(pair[0], PROMPTS), **SHAPE)
    assert record.collected.counters["accepted"] > 0


def test_a_feature_draft_is_refused_in_one_line_for_beams_or_a_target_of_another_width(pair, tmp_path):
    import json
    import shutil

    from tests.cli_runs import assert_one_error_line, specsched

    base = ["run", "--backend", "hf", "--target", str(pair[0]), "--prompt", "w1 w2", "--max-new-tokens", "4"]
    out = specsched(*base, "--draft", str(pair[1]), "--mode", "dsbd", timeout=120)
    assert_one_error_line(out, 2, "--mode dsbd cannot use the feature draft")
    narrow = shutil.copytree(pair[1], tmp_path / "narrow")
    config = json.loads((narrow / "feature_config.json").read_text())
    (narrow / "feature_config.json").write_text(json.dumps({**config, "hidden": config["hidden"] // 2}))
    out = specsched(*base, "--draft", str(narrow), timeout=120)
    assert_one_error_line(out, 2, "it was trained for another target")


def test_an_engine_with_a_feature_draft_refuses_a_dsbd_job_in_one_line_and_serves_the_next(pair):
    """The engine's workers load one draft: a beam job (dsbd) on an engine whose draft reads features is bad
    input at submit, and the engine stays up for the jobs it can serve."""
    from specsched.runtime.core.config import ConfigError
    from specsched.runtime.engine.engine import Engine

    config = RunConfig.of(backend="hf", target=str(pair[0]), draft=str(pair[1]), prompts=PROMPTS[:1], workers=1,
                          max_new_tokens=4)
    with Engine(config) as e:
        assert e.draft_reads_features
        with pytest.raises(ConfigError, match="--mode dsbd cannot use the feature draft"):
            e.submit(mode="dsbd")
        assert e.generate().status == "ok"


def test_a_target_without_features_answers_a_draft_that_asks_as_if_it_had_not():
    """The sim target gives no features: a draft saying held >= 0 (a hostile or confused worker) gets plain
    verdicts, and the target's cache is not thrown away each round."""
    from specsched.runtime.backends.sim import SimBackend

    target = SimBackend(RunConfig(backend="sim")).target()
    assert not target.gives_features


@pytest.mark.slow
def test_the_shipped_feature_draft_is_lossless_on_the_default_target_and_accepts_tokens():
    """`--draft smollm2-feature`, real processes: greedy text equals target-only decoding, and so does a
    coupled sampled text (T = 0.8) with the same seed; the draft's tokens are accepted."""
    from specsched.runtime.engine.engine import Engine

    prompt = "Tom has 3 apples and buys 5 more. How many apples does he have? Explain."
    greedy, sampled = dict(workers=1, max_new_tokens=32), dict(temperature=0.8, coupling="gumbel", seed=3)
    with Engine(RunConfig(draft="smollm2-feature")) as e:
        ar, sd = (e.generate(prompt, mode=m, **greedy) for m in ("ar", "seed"))
        ar_t, sd_t = (e.generate(prompt, mode=m, **greedy, **sampled) for m in ("ar", "seed"))
    assert sd.status == sd_t.status == "ok", (sd.error, sd_t.error)
    assert sd.sequences[0].tokens == ar.sequences[0].tokens
    assert sd_t.sequences[0].tokens == ar_t.sequences[0].tokens
    assert sd.collected.counters["accepted"] > 0 and sd_t.collected.counters["accepted"] > 0
