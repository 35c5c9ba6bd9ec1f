"""A CPU target's cheaper forward for a verification's rows (runtime/models/few_rows.py): the shared-head
attention computes exactly transformers' logits, the packed matrices the same up to fp32 rounding, a weight
changed in place is never read stale, and SPECSCHED_CPU_ROWS=0 keeps the stock forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.core.config import ConfigError
from specsched.runtime.core.device import cpu_rows
from specsched.runtime.models import few_rows
from tests.fp32 import llama_tolerance
from tests.tiny_hf import make_model

pytestmark = pytest.mark.skipif(not few_rows.packs_available(), reason="no oneDNN in this torch build")


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("few-rows") / "target"
    make_model(path, vocab=96, seed=0, layers=3)
    return path


def loaded(target, monkeypatch, setting: str) -> HFModel:
    monkeypatch.setenv("SPECSCHED_CPU_ROWS", setting)
    return HFModel(str(target), "fp32")


def runs(model: HFModel) -> list[np.ndarray]:
    """A verification's shapes: a 20-token prompt, then 5 and 2 new rows on its cache, then a batch of two
    sequences (a 4-D mask over a padded layout) of 5 and 3 new rows."""
    cache = model.new_cache()
    out = [model.forward(cache, list(range(2, 22))), model.forward(cache, [30, 31, 32, 33, 34], first_row=0),
           model.forward(cache, [40, 41], first_row=0)]
    a, b = model.new_cache(), model.new_cache()
    model.forward(a, list(range(5, 17)))
    model.forward(b, list(range(50, 57)))
    return out + model.forward_batch([a, b], [[60, 61, 62, 63, 64], [70, 71, 72]], first_rows=[0, 0])


def test_shared_heads_compute_transformers_logits_bit_for_bit(target, monkeypatch):
    stock = loaded(target, monkeypatch, "0")
    shared = loaded(target, monkeypatch, "0")
    assert few_rows._register()
    shared.model.config._attn_implementation = few_rows.ATTENTION  # the attention alone, matrices as they were
    assert stock.speed_ups == [] and shared.model.model.config._attn_implementation == few_rows.ATTENTION
    for a, b in zip(runs(stock), runs(shared)):
        assert np.array_equal(a, b)


def test_packed_matrices_agree_up_to_rounding_and_greedy_tokens_match(target, monkeypatch):
    stock, cheaper = loaded(target, monkeypatch, "0"), loaded(target, monkeypatch, "1")
    assert cheaper.speed_ups == [f"packed matrices ({3 * 7 + 1})", "shared key/value heads"]
    for a, b in zip(runs(stock), runs(cheaper)):
        np.testing.assert_allclose(b, a, rtol=0, atol=llama_tolerance(stock.model.config, a, context=32))
        assert (a.argmax(-1) == b.argmax(-1)).all()


def test_rows_below_the_threshold_take_mkl_and_from_it_onednn():
    linear = torch.nn.Linear(48, 40)
    few_rows.speed_up(linear)  # a bare module: its matrices only
    x = torch.randn(2, 6, 48)
    with torch.inference_mode():
        for rows in range(1, 7):
            got, plain = linear(x[:, :rows]), torch.nn.functional.linear(x[:, :rows], linear.weight, linear.bias)
            if rows * 2 < few_rows.PACKED_ROWS:
                assert torch.equal(got, plain)
            torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    assert hasattr(linear, "_packed")


def test_a_weight_changed_in_place_is_packed_again():
    linear = torch.nn.Linear(32, 16, bias=False)
    few_rows.speed_up(linear)
    x = torch.randn(8, 32)
    with torch.no_grad():
        before = linear(x)
        linear.weight.mul_(2)  # what an optimiser's step or load_state_dict does
        torch.testing.assert_close(linear(x), 2 * before, rtol=1e-5, atol=1e-5)


def test_training_through_it_takes_autograd_s_path():
    linear = torch.nn.Linear(32, 16)
    few_rows.speed_up(linear)
    linear(torch.randn(8, 32)).sum().backward()
    assert linear.weight.grad is not None and not hasattr(linear, "_packed")


def test_the_setting_is_checked(monkeypatch):
    monkeypatch.delenv("SPECSCHED_CPU_ROWS", raising=False)
    assert cpu_rows()
    monkeypatch.setenv("SPECSCHED_CPU_ROWS", "0")
    assert not cpu_rows()
    monkeypatch.setenv("SPECSCHED_CPU_ROWS", "yes")
    with pytest.raises(ConfigError, match="SPECSCHED_CPU_ROWS=yes: choose 1"):
        cpu_rows()
