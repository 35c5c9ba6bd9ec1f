"""A feature draft of several decoder layers: grown from a trained one it proposes what that one did, its files
round-trip, and a one-layer file from before `layers` existed still loads."""

from __future__ import annotations

import json

import pytest
import torch
from cli_runs import specsched, stderr_lines
from safetensors.torch import load_file, save_file

from specsched.runtime.apps.drafts.feature_recipe import trained_layers
from specsched.runtime.apps.drafts.training.feature_train import FeatureTrainConfig, train
from specsched.runtime.core.config import ConfigError
from specsched.runtime.models.draft_files import FEATURE_CONFIG, FEATURE_WEIGHTS
from specsched.runtime.models.feature_draft import (
    FeatureDraftConfig,
    load_feature_draft,
    new_feature_draft,
    save_feature_draft,
)
from specsched.runtime.models.feature_lean import LeanFeatureDraft
from specsched.runtime.models.lean_forward import int8_available
from tests.tiny_hf import make_pair


@pytest.fixture
def target(tmp_path):
    return make_pair(tmp_path)[0]


def _inputs(d: int, n: int = 9, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, n, d, generator=gen) * 3, torch.randint(2, 60, (1, n), generator=gen),
            torch.arange(n)[None])


def _trained(target, layers: int = 1):
    """A draft whose every weight is off its initial value (as a trained one is): random, seeded."""
    draft = new_feature_draft(target, torch.arange(64)).grow(layers)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    return draft


def test_a_draft_grown_by_a_layer_predicts_exactly_what_it_did_and_then_learns(target):
    one = _trained(target)
    features, tokens, positions = _inputs(one.cfg.hidden)
    with torch.no_grad():
        before, _ = one.step(features, tokens, positions)
        grown, cache = one.grow(2).step(features, tokens, positions)
    assert one.cfg.layers == 2 and len(cache) == 2
    assert torch.equal(grown, before)
    # the new layer trains: its output matrix has a gradient from the first step
    one.step(features, tokens, positions)[0].pow(2).sum().backward()
    assert one.layers[1].o.weight.grad.abs().sum() > 0


@pytest.mark.skipif(not int8_available(), reason="no quantised CPU engine in this torch build")
def test_the_int8_forward_of_a_grown_draft_is_the_one_layer_drafts(target):
    """The identity layer's zero matrices quantise to zero: the CPU path of a grown draft proposes bit for bit
    what it did."""
    one = _trained(target)
    features, tokens, positions = _inputs(one.cfg.hidden)
    before, _ = LeanFeatureDraft(one).step(features, tokens, positions)
    after, _ = LeanFeatureDraft(one.grow(3)).step(features, tokens, positions)
    assert torch.equal(after, before)


def test_a_two_layer_draft_round_trips_through_its_files_and_caches_per_layer(target, tmp_path):
    draft = _trained(target, layers=2).eval()
    save_feature_draft(draft, tmp_path / "two")
    assert json.loads((tmp_path / "two" / FEATURE_CONFIG).read_text())["layers"] == 2
    loaded = load_feature_draft(tmp_path / "two", target)
    features, tokens, positions = _inputs(draft.cfg.hidden, n=8)
    with torch.no_grad():
        whole, _ = loaded.step(features, tokens, positions)
        head, cache = loaded.step(features[:, :5], tokens[:, :5], positions[:, :5])
        tail, _ = loaded.step(features[:, 5:], tokens[:, 5:], positions[:, 5:], cache)
        saved, _ = draft.step(features, tokens, positions)
    torch.testing.assert_close(torch.cat((head, tail), 1), whole, atol=1e-4, rtol=0)
    torch.testing.assert_close(whole, saved, atol=0.05, rtol=0)  # the file holds bf16 weights


def test_a_one_layer_file_from_before_layers_loads_as_it_was(target, tmp_path):
    """Files written before `layers` name the layer's weights at the top level (`qkv.weight`) and their config
    has no `layers`: they load, as one layer, to the same draft."""
    draft = _trained(target)
    save_feature_draft(draft, tmp_path / "new")
    old = tmp_path / "old"
    old.mkdir()
    state = load_file(str(tmp_path / "new" / FEATURE_WEIGHTS))
    save_file({k.removeprefix("layers.0."): v for k, v in state.items()}, str(old / FEATURE_WEIGHTS))
    config = json.loads((tmp_path / "new" / FEATURE_CONFIG).read_text())
    del config["layers"]
    (old / FEATURE_CONFIG).write_text(json.dumps(config))
    features, tokens, positions = _inputs(draft.cfg.hidden)
    with torch.no_grad():
        a, _ = load_feature_draft(old, target).step(features, tokens, positions)
        b, _ = load_feature_draft(tmp_path / "new", target).step(features, tokens, positions)
    assert torch.equal(a, b)


def test_grown_layers_are_drawn_from_their_seed(target):
    def grown(seed):
        return new_feature_draft(target, torch.arange(64)).grow(2, seed=seed).layers[1].qkv.weight

    assert torch.equal(grown(3), grown(3)) and not torch.equal(grown(3), grown(4))


def test_a_file_whose_weights_are_not_its_configs_layers_is_refused(target, tmp_path):
    save_feature_draft(_trained(target, layers=2), tmp_path / "two")
    config = json.loads((tmp_path / "two" / FEATURE_CONFIG).read_text())
    (tmp_path / "two" / FEATURE_CONFIG).write_text(json.dumps({**config, "layers": 1}))
    with pytest.raises(KeyError, match=r"unexpected \['layers\.1\."):
        load_feature_draft(tmp_path / "two", target)


def test_layers_are_at_least_one_and_a_draft_never_shrinks(target, tmp_path):
    with pytest.raises(ValueError, match="layers"):
        FeatureDraftConfig(layers=0)
    with pytest.raises(ValueError, match="cannot shrink"):
        new_feature_draft(target, torch.arange(64)).grow(2).grow(1)
    proc = specsched("models", "features", str(tmp_path), "--stage", "train", "--layers", "0")
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == ["specsched: error: --layers must be at least 1, got 0"]


def _records(d: int):
    gen = torch.Generator().manual_seed(0)
    return [{"ids": torch.randint(2, 60, (16,), generator=gen, dtype=torch.int32), "start": 4,
             "feats": torch.randn(16, d, generator=gen).half()} for _ in range(4)]


def test_a_checkpoint_with_one_layer_names_resumes_with_its_layer(target, tmp_path):
    """A training checkpoint written before `layers` names the layer's weights at the top level: resumed, the
    draft has the checkpoint's layer, not its starting one."""
    cfg = FeatureTrainConfig(steps=2, batch=2, max_len=16, warmup=1, lr=1e-2)
    draft = new_feature_draft(target, torch.arange(64))
    records = _records(draft.cfg.hidden)
    trained = train(draft, records, cfg, ckpt=tmp_path / "ckpt.pt", log=lambda m: None)
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    state["model"] = {k.removeprefix("layers.0."): v for k, v in state["model"].items()}
    torch.save(state, tmp_path / "ckpt.pt")
    fresh = new_feature_draft(target, torch.arange(64), seed=5)
    resumed = train(fresh, records, cfg, ckpt=tmp_path / "ckpt.pt", log=lambda m: None)
    assert torch.equal(resumed.layers[0].qkv.weight, trained.layers[0].qkv.weight)


def test_the_layers_a_train_stage_makes_and_the_ones_it_refuses(target, tmp_path):
    two = tmp_path / "two"
    save_feature_draft(_trained(target, layers=2), two)
    ckpt = tmp_path / "ckpt.pt"
    assert trained_layers(None, None, ckpt) == 1
    assert trained_layers(None, two, ckpt) == 2 and trained_layers(3, two, ckpt) == 3
    with pytest.raises(ConfigError, match="--layers 1, but the --init draft .* has 2, and a draft only grows"):
        trained_layers(1, two, ckpt)
    old_names = {k.removeprefix("layers.0."): v for k, v in _trained(target).state_dict().items()}
    torch.save({"model": old_names}, ckpt)  # a one-layer checkpoint from before `layers`
    assert trained_layers(None, None, ckpt) == 1
    with pytest.raises(ConfigError, match="ckpt.pt holds a draft of 1 layer.*, but the --init draft"):
        trained_layers(None, two, ckpt)
    torch.save({"model": _trained(target, layers=3).state_dict()}, ckpt)
    assert trained_layers(None, two, ckpt) == 3  # a rerun resumes the checkpoint as it was
    with pytest.raises(ConfigError, match="holds a draft of 3 layer"):
        trained_layers(2, two, ckpt)
    with pytest.raises(ConfigError, match="no feature draft there"):
        trained_layers(None, tmp_path / "nowhere", ckpt)
