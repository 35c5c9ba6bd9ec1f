"""GrowingCache: appending in place must give exactly DynamicCache's logits, through crops and rollbacks."""

from __future__ import annotations

import warnings

import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from specsched.runtime.backends.backend import ChainPlan
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.models.growing_cache import MIN_CAPACITY, GrowingCache, cache_keyword
from tests.fp32 import assert_close

# 2 layers; the longest reduction is attention over the longest context the script builds (tests/fp32.py)
SHAPE = dict(layers=2, width=MIN_CAPACITY + 64)


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(cfg).eval()


@torch.inference_mode()
def run(model, cache, script):
    """Feed chunks / crop / index_select rollbacks in order; collect the logits of every chunk."""
    out = []
    for op, arg in script:
        if op == "feed":
            start = cache.get_seq_length()
            pos = torch.arange(start, start + len(arg))[None]
            kept = {cache_keyword(model): cache}
            out.append(model(torch.tensor([arg]), position_ids=pos, use_cache=True, **kept).logits)
        elif op == "crop":
            cache.crop(-arg)
        else:  # what the hf worker's keep() does: replace keys/values by a selection of rows
            idx = torch.tensor(arg)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys.index_select(-2, idx), layer.values.index_select(-2, idx)
    return out


def test_growing_cache_matches_dynamic_cache_through_crops_rollbacks_and_regrowth():
    model = tiny_llama()
    long = [i % 50 for i in range(MIN_CAPACITY + 40)]  # forces one regrowth past the first buffer
    script = [("feed", [1, 2, 3, 4, 5]), ("feed", [6, 7, 8]), ("crop", 2), ("feed", [9, 10]),
              ("keep", [0, 1, 2, 4, 5]), ("feed", [11]), ("feed", long), ("crop", 7), ("feed", [12, 13, 14])]
    expected = run(model, DynamicCache(), script)
    cache = GrowingCache()
    got = run(model, cache, script)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert_close(a, b, **SHAPE)
    layer = cache.layers[0]
    assert cache.get_seq_length() == 5 + 1 + len(long) - 7 + 3
    assert layer.in_place() and layer.capacity >= cache.get_seq_length()


def test_appending_writes_into_the_same_buffer():
    model = tiny_llama()
    cache = GrowingCache()
    run(model, cache, [("feed", [1, 2, 3])])
    buffer = cache.layers[1].keys.data_ptr()  # keys: a view of the buffer's first rows
    run(model, cache, [("feed", [4]), ("crop", 1), ("feed", [5, 6])])
    layer = cache.layers[1]
    assert layer.in_place() and layer.keys.data_ptr() == buffer  # no reallocation, no copy of the old rows


def test_a_cache_filled_in_inference_mode_keeps_working_outside_it():
    model = tiny_llama()
    reference = run(model, DynamicCache(), [("feed", [1, 2, 3]), ("feed", [4, 5])])
    cache = GrowingCache()
    run(model, cache, [("feed", [1, 2, 3])])  # run() uses inference_mode
    with torch.no_grad():  # e.g. a training-style caller: the buffer is copied out, not written in place
        pos = torch.tensor([[3, 4]])
        out = model(torch.tensor([[4, 5]]), position_ids=pos, use_cache=True, **{cache_keyword(model): cache}).logits
    assert_close(out, reference[1], **SHAPE)


def test_the_runtime_hands_transformers_its_cache_by_the_name_it_keeps():
    """transformers 5.24 renamed a forward's `past_key_values` to `cache` and drops the old name in 5.40: the
    runtime's forwards (one continuation, a batch, a drafted chain) must not lean on the old one."""
    model = HFModel.of(tiny_llama())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values", category=FutureWarning)
        cache = model.new_cache()
        model.forward(cache, [1, 2, 3])
        model.forward_batch([cache, model.new_cache()], [[4], [5, 6]])
        model.draft_chain(cache, [7], ChainPlan(k=2, params=SamplingParams()))
    assert len(cache) == 6  # 3, 1, then the chain reads its pending token and the first of the 2 it drafts
