"""The feature draft's int8 forward on the CPU (runtime/models/feature_lean.py): close to the fp32 module, one
draft layer or two, and precise beside the target's outlier channels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specsched.runtime.models.lean_forward import int8_available
from tests.feature_drafts import feature_model as _model


@pytest.mark.skipif(not int8_available(), reason="no quantised CPU engine in this torch build")
@pytest.mark.parametrize("drafts", ["pair", "pair2"])
def test_the_int8_forward_stays_close_to_the_fp32_module_and_proposes_its_tokens(drafts, request):
    """The CPU path (models/feature_lean.py) changes q a little, never losslessness (the verifier accepts
    against the q used): its top token is the fp32 module's nearly everywhere, plain reads and drafted chains."""
    from specsched.runtime.models.feature_lean import LeanFeatureDraft

    pair = request.getfixturevalue(drafts)
    fp32, int8, split = _model(pair), _model(pair), _model(pair)
    fp32.lean = None
    split.draft.cfg.outlier_dims = [3, 7, 11]  # these channels in fp32 (SplitLinear), the rest int8
    split.lean = LeanFeatureDraft(split.draft)
    assert int8.lean is not None and all(layer.qkv.fp32 is not None for layer in split.lean.layers)
    assert len(split.lean.layers) == split.draft.cfg.layers
    rng = np.random.default_rng(1)
    seq = rng.integers(2, 96, 40).tolist()
    truth = rng.standard_normal((39, int8.hidden)).astype(np.float32)
    truth[:, 7] *= 15  # an outlier channel, as the target's features have
    rows = {}
    for name, model in (("int8", int8), ("split", split), ("fp32", fp32)):
        cache = model.new_cache()
        model.take_features(cache, 0, truth)
        plain = model.forward(cache, seq)
        chain = [model.forward(cache, [t], [len(cache) - 1]) for t in seq[:6]]
        rows[name] = np.concatenate([plain, *chain])
    finite = np.isfinite(rows["fp32"])
    scale = np.abs(rows["fp32"][finite]).max()
    for name in ("int8", "split"):
        assert (np.isfinite(rows[name]) == finite).all()  # the same vocabulary
        agree = (rows[name].argmax(-1) == rows["fp32"].argmax(-1)).mean()
        assert agree >= 0.8, (name, agree)  # a wrong rope, mask or matrix agrees about 1 time in 96
        assert np.abs(rows[name][finite] - rows["fp32"][finite]).max() <= 0.05 * scale, name


@pytest.mark.skipif(not int8_available(), reason="no quantised CPU engine in this torch build")
def test_splitting_off_an_outlier_channel_keeps_the_others_precise():
    """One channel 30x the others: a per-token int8 scale leaves the rest a few levels; kept in fp32
    (LLM.int8()'s decomposition), it no longer sets the scale."""
    from specsched.runtime.models.feature_lean import SplitLinear
    from specsched.runtime.models.lean_forward import Int8Linear

    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=gen)
    x = torch.randn(32, 48, generator=gen)
    x[:, 5] *= 30
    exact = x @ w.T
    plain = (Int8Linear(w)(x) - exact).abs().mean()
    split = (SplitLinear(w, [5])(x) - exact).abs().mean()
    assert split < 0.25 * plain, (float(split), float(plain))
    assert (SplitLinear(w, [])(x) == Int8Linear(w)(x)).all()  # no channel named: one int8 matrix
