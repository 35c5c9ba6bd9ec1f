"""The distilled-draft module: restricted vocabulary, KV cache, save/load, init math, lossless SD."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specsched.runtime.apps.drafts.evaluation.evaluate import LookupDrafter, chain, decode
from specsched.runtime.apps.drafts.training.draft_init import compress_target
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.models.draft_model import DraftConfig, DraftLM, load_draft, load_model, save_draft
from specsched.runtime.models.errors import ModelUnavailable, UnknownModel
from specsched.runtime.models.growing_cache import cache_out
from specsched.runtime.models.lean_forward import Int8Linear, int8_available
from specsched.runtime.models.registry import resolve_draft, resolve_target
from tests.fp32 import assert_close, assert_greedy_equal

VOCAB, HIDDEN = 96, 64
# reductions at most 128 long (the target's MLP), over its 3 layers; the draft's 2 are at most 64 (tests/fp32.py)
TARGET_SHAPE, DRAFT_SHAPE = dict(layers=3, width=128), dict(layers=2, width=HIDDEN)


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.3,
        eos_token_id=1,
    )
    return LlamaForCausalLM(cfg).eval()


def small_cfg(**kw) -> DraftConfig:
    base = dict(
        hidden=32,
        layers=2,
        heads=4,
        kv_heads=2,
        head_dim=16,
        intermediate=64,
        draft_vocab=40,
        target_vocab=VOCAB,
        target_hidden=HIDDEN,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        int8=False,  # exact-match tests compare the fp32 lean path; the int8 test opts in
    )
    return DraftConfig(**{**base, **kw})


def make_draft(target: LlamaForCausalLM, **kw) -> DraftLM:
    cfg = small_cfg(**kw)
    basis = torch.linalg.qr(torch.randn(HIDDEN, cfg.hidden))[0]
    vocab = torch.randperm(VOCAB)[: cfg.draft_vocab].sort().values
    return compress_target(target, cfg, list(range(cfg.layers)), vocab, basis).eval()


def test_restricted_vocab_gives_zero_probability_outside(target: LlamaForCausalLM) -> None:
    draft = make_draft(target)
    logits = draft(torch.tensor([[3, 4, 5]])).logits
    assert logits.shape == (1, 3, VOCAB)
    inside = torch.zeros(VOCAB, dtype=torch.bool)
    inside[draft.vocab_ids] = True
    assert torch.isneginf(logits[..., ~inside]).all() and torch.isfinite(logits[..., inside]).all()
    q = logits.softmax(-1)
    # a sum of 96 fp32 probabilities is within 96 u ~ 6e-6 of 1: allclose's default rtol 1e-5 covers it
    assert (q[..., ~inside] == 0).all() and torch.allclose(q.sum(-1), torch.ones(1, 3))


def test_cached_steps_match_one_full_forward(target: LlamaForCausalLM) -> None:
    draft = make_draft(target)
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    full = draft(ids, use_cache=False).logits
    out = draft(ids[:, :3])
    cache = cache_out(out)
    steps = [draft(ids[:, i : i + 1], past_key_values=cache).logits for i in range(3, 6)]
    assert_close(torch.cat(steps, 1), full[:, 3:], **DRAFT_SHAPE)


def test_the_lean_inference_forward_matches_the_training_forward(target: LlamaForCausalLM) -> None:
    """Inference (no grad) takes the hand-written lean path; training the transformers modules: same math,
    for a plain continuation after a cache and for a token tree under a 4D mask."""
    draft = make_draft(target)
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    reference = draft(ids, use_cache=False).logits  # grad enabled: the transformers path
    with torch.inference_mode():
        out = draft(ids[:, :4])
        step = draft(ids[:, 4:], past_key_values=cache_out(out)).logits
        assert_close(torch.cat([out.logits, step], 1), reference, **DRAFT_SHAPE)
        for _ in range(2):  # one token per call, as a decode loop runs; the second pass reuses cached rows
            cache, steps = None, []
            for i in range(ids.shape[1]):
                one = draft(ids[:, i : i + 1], past_key_values=cache)
                cache = cache_out(one)
                steps.append(one.logits)
            assert_close(torch.cat(steps, 1), reference, **DRAFT_SHAPE)
        assert set(draft.lean().rows) == set(ids[0].tolist())
        # a tree after the 4 cached tokens: two siblings (11, 3) of position 4 -> both see only the prefix
        tree = draft(ids[:, :4])
        mask = torch.ones(1, 1, 2, 6, dtype=torch.bool)
        mask[0, 0, 0, 5] = mask[0, 0, 1, 4] = False
        siblings = draft(torch.tensor([[11, 3]]), past_key_values=cache_out(tree), attention_mask=mask,
                         position_ids=torch.tensor([[4, 4]])).logits
    alone = draft(torch.tensor([[5, 9, 2, 7, 3]]), use_cache=False).logits
    assert_close(siblings[0, 0], reference[0, 4], **DRAFT_SHAPE)
    assert_close(siblings[0, 1], alone[0, 4], **DRAFT_SHAPE)


@pytest.mark.skipif(not int8_available(), reason="no quantised CPU engine in this torch build")
def test_int8_inference_stays_close_to_the_fp32_forward(target: LlamaForCausalLM) -> None:
    """int8 weights change the draft's q a little (never losslessness: the verifier uses that q)."""
    draft = make_draft(target, int8=True)
    ids = torch.tensor([[5, 9, 2, 7, 11, 3, 8, 1]])
    reference = draft(ids, use_cache=False).logits[..., draft.vocab_ids]  # grad enabled: fp32 transformers path
    with torch.inference_mode():
        out = draft(ids).logits[..., draft.vocab_ids]
    assert draft.lean().int8
    assert (out - reference).norm() / reference.norm() < 0.2  # a broken layout gives ~1.4
    tv = 0.5 * (out.softmax(-1) - reference.softmax(-1)).abs().sum(-1)  # total variation per position
    assert tv.max() < 0.1
    assert not make_draft(target, int8=True).to(torch.bfloat16).lean().int8  # int8 is for fp32 on CPU only
    assert not make_draft(target).lean().int8


@pytest.mark.skipif(not int8_available(), reason="no quantised CPU engine in this torch build")
def test_an_int8_row_does_not_depend_on_the_rows_sharing_its_call() -> None:
    """A restarted draft re-reads its context in one call where the first run read it a few tokens at a
    time: each token's result must be the same bits either way, or a sampled run's text changes (issue 43)."""
    torch.manual_seed(0)
    layer = Int8Linear(torch.randn(96, 48))
    row = torch.randn(1, 48) * 3
    alone = layer(row)
    for n, spread in ((2, 0.1), (5, 10.0), (40, 100.0)):  # neighbours far smaller and far larger than the row
        rows = torch.randn(n, 48) * spread
        rows[n // 2] = row[0]
        assert torch.equal(layer(rows)[n // 2], alone[0])
    exact = row @ layer_weight(layer).T
    assert (alone - exact).norm() / exact.norm() < 0.05  # 7-bit activations, 8-bit weights: ~2 %


def layer_weight(layer: Int8Linear) -> torch.Tensor:
    return torch.ops.quantized.linear_unpack(layer.packed)[0].dequantize()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_drafts_stay_finite_and_close(target: LlamaForCausalLM, dtype: torch.dtype) -> None:
    """`--dtype bf16/fp16` drafts take the lean path too. Its norm sums squares in fp32: in fp16, sum(x^2)
    over a 32-wide stream overflows once rms(x) > ~45; this draft's scaled input is at ~300."""
    draft = make_draft(target)
    with torch.no_grad():
        draft.proj_in.weight.mul_(1000.0)  # rms(x) ~ 300
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    reference = draft(ids, use_cache=False).logits[..., draft.vocab_ids]  # fp32, transformers path
    with torch.inference_mode():
        out = copy.deepcopy(draft).to(dtype)(ids).logits[..., draft.vocab_ids].float()
    assert torch.isfinite(out).all()
    tv = 0.5 * (out.softmax(-1) - reference.softmax(-1)).abs().sum(-1)  # total variation per position
    assert tv.max() < 0.1


def test_the_lean_forward_follows_new_weights(target: LlamaForCausalLM) -> None:
    """The lean path works on copies: loading other weights or changing dtype must not leave them stale."""
    draft, other = make_draft(target), make_draft(target)
    ids = torch.tensor([[5, 9, 2, 7]])
    with torch.inference_mode():
        draft(ids)  # builds the lean copies
    draft.load_state_dict(other.state_dict())
    draft.vocab_ids = other.vocab_ids
    with torch.inference_mode():
        assert torch.equal(draft(ids).logits, other(ids).logits)
        assert draft.to(torch.bfloat16)(ids).logits.dtype == torch.bfloat16


def test_full_width_compression_reproduces_the_target(target: LlamaForCausalLM) -> None:
    cfg = small_cfg(hidden=HIDDEN, layers=3, intermediate=128, draft_vocab=VOCAB)
    draft = compress_target(target, cfg, [0, 1, 2], torch.arange(VOCAB), torch.eye(HIDDEN), head_scale=1.0)
    ids = torch.tensor([[1, 7, 30, 4, 66, 12]])
    with torch.no_grad():
        assert_close(draft(ids).logits, target(ids).logits, **TARGET_SHAPE)


def test_save_load_roundtrip_ships_no_embeddings(target: LlamaForCausalLM, tmp_path: Path) -> None:
    target.save_pretrained(tmp_path / "target")
    draft = make_draft(target)
    save_draft(draft, tmp_path / "draft", meta={"steps": 3})
    from safetensors import safe_open

    with safe_open(str(tmp_path / "draft" / "draft.safetensors"), "pt") as f:
        assert not any(k.startswith("embed") for k in f.keys())
        assert f.get_tensor("head.weight").dtype == torch.bfloat16
    loaded = load_model(tmp_path / "draft", target_dir=tmp_path / "target")
    assert isinstance(loaded, DraftLM) and torch.equal(loaded.vocab_ids, draft.vocab_ids)
    for name, value in draft.trainable_state().items():  # shipped in bf16, loaded back as fp32
        expected = value.to(torch.bfloat16).float() if value.is_floating_point() else value
        assert torch.equal(loaded.state_dict()[name] if name != "vocab_ids" else loaded.vocab_ids, expected)
    assert torch.equal(loaded.embed.weight, target.model.embed_tokens.weight)  # read from the target
    assert isinstance(load_draft(tmp_path / "draft", torch.bfloat16, target_dir=tmp_path / "target"), DraftLM)


def _logits_after(target, prompt: list[int]):
    """The target's logits after prompt + prefix, one fresh forward (assert_greedy_equal's reference)."""

    def after(_: int, prefix: list[int]):
        with torch.inference_mode():
            return target(torch.tensor([prompt + prefix])).logits[0, -1]

    return after


@pytest.mark.parametrize("which", ["draft", "lookup", "draft+lookup+stop"])
def test_speculative_decoding_is_lossless(target: LlamaForCausalLM, which: str) -> None:
    prompt = [5, 17, 42, 8, 5, 17]
    model = HFModel.of(target)  # the runtime's view of it: eos from its config
    ar = decode(model, prompt, 40)
    drafter = {"draft": lambda: chain(HFModel.of(make_draft(target)), prompt, 4),
               "lookup": lambda: LookupDrafter(prompt, 4),
               "draft+lookup+stop": lambda: chain(HFModel.of(make_draft(target)), prompt, 4, lookup=3,
                                                  min_confidence=0.4)}[which]()
    sd = decode(model, prompt, 40, drafter)
    assert_greedy_equal([sd.tokens], [ar.tokens], _logits_after(target, prompt), **TARGET_SHAPE)
    assert sd.verifies < len(sd.tokens) or sd.accepted == 0
    assert len(sd.tokens) <= sd.accepted + sd.verifies  # each verification emits accepted + 1 tokens


class _Clock:
    """A fake perf_counter: the stand-in models advance it by what their forward 'costs'."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Timed(torch.nn.Module):
    """A stand-in model whose n-th forward costs `ms[n]` on `clock` (the last value repeats); it logs
    every call's (cached, new) token counts."""

    def __init__(self, clock: _Clock, ms: list[float]) -> None:
        super().__init__()
        self.clock, self.ms, self.calls = clock, ms, []
        self.config = LlamaConfig(vocab_size=64)

    def forward(self, input_ids: torch.Tensor, past_key_values=None, use_cache: bool = True):
        self.calls.append((past_key_values.get_seq_length(), input_ids.shape[1]))
        past_key_values.update(torch.zeros(1, 1, input_ids.shape[1], 2), torch.zeros(1, 1, input_ids.shape[1], 2), 0)
        self.clock.now += self.ms[min(len(self.calls) - 1, len(self.ms) - 1)] / 1e3


def test_forward_costs_times_one_target_forward_then_k_draft_forwards(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost ratio's clock: the draft is timed in the pattern serial SD runs it, each model on its own
    cache cropped back to the context; the 2 warm-up rounds are dropped and each time is a median."""
    import specsched.runtime.apps.drafts.evaluation.forward_costs as fc

    clock = _Clock()
    monkeypatch.setattr(fc, "time", clock)
    # call 1 is the untimed prefill; calls 2-3 are warm-up rounds (slow); then 20, 90, 21 -> median 21
    target = _Timed(clock, [0.0, 500.0, 500.0, 20.0, 90.0, 21.0])
    # the draft's first forward of each round is cold (1.5 ms), the other three 1.0 ms -> median 1.0
    draft = _Timed(clock, [0.0] + [9.0] * 8 + [1.5, 1.0, 1.0, 1.0] * 3)
    target_ms, draft_ms = fc.forward_costs(target, draft, context=16, rounds=3, k=4)
    # each model prefills 16 tokens, then 2 warm-up rounds + 3, every call after the same 16 cached tokens
    assert target.calls == [(0, 16)] + [(16, 1)] * 5 and draft.calls == [(0, 16)] + [(16, 1)] * 20
    assert target_ms == pytest.approx(21.0) and draft_ms == pytest.approx(1.0)


def test_unknown_names_raise_model_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSCHED_CACHE", str(tmp_path))
    with pytest.raises(ModelUnavailable, match="specsched models list"):
        resolve_target("no-such-model", progress=False)
    with pytest.raises(ModelUnavailable):
        resolve_draft(str(tmp_path / "missing"))
    with pytest.raises(UnknownModel, match="without config.json"):
        resolve_target(str(tmp_path), progress=False)  # a folder, but not a model
    (tmp_path / "config.json").write_text("{}")
    assert resolve_target(str(tmp_path), progress=False) == tmp_path
    with pytest.raises(UnknownModel, match="has no default draft"):
        resolve_draft(None, target=str(tmp_path))


@pytest.mark.slow
def test_shipped_distilled_draft_is_lossless_on_the_real_target() -> None:
    """The default pair: greedy SD with the shipped distilled draft reproduces target-only decoding exactly (the
    feature draft, the default on the CPU: tests/test_feature_draft.py)."""
    from transformers import AutoTokenizer

    from specsched.runtime.models.registry import resolve_pair

    target_dir, draft_dir = resolve_pair(None, None, progress=False, features=False)
    tok = AutoTokenizer.from_pretrained(target_dir)
    target, draft = load_model(target_dir), load_model(draft_dir, target_dir=target_dir)
    chat = [{"role": "user", "content": "Tom has 3 apples and buys 5 more. How many apples does he have?"}]
    prompt = list(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
    ar = decode(HFModel.of(target), prompt, 32)
    sd = decode(HFModel.of(target), prompt, 32, chain(HFModel.of(draft), prompt, 4))
    # SmolLM2-135M: 30 layers, reductions up to 1536 long (its MLP)
    assert_greedy_equal([sd.tokens], [ar.tokens], _logits_after(target, prompt), layers=30, width=1536)
    assert sd.accepted > 0


def test_a_damaged_shipped_draft_says_reinstall_not_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specsched.runtime.models.registry as registry

    (tmp_path / "draft").mkdir()  # the shipped draft's folder, without its files
    monkeypatch.setattr(registry, "ASSETS", tmp_path)
    with pytest.raises(ModelUnavailable, match="reinstall specsched") as caught:
        resolve_draft(str(tmp_path / "draft"))
    assert not isinstance(caught.value, UnknownModel)
