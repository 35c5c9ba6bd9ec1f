"""A feature draft trained inside the tests, in seconds, for a tiny transformers target; that target with a chat
template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch


def make_feature_draft(target: Path, out: Path, *, steps: int = 60, seed: int = 0, layers: int = 1) -> Path:
    """Train a feature draft of `layers` decoder layers on the target's own sampled continuations of random
    prompts (features from one fp32 forward, as `specsched models` makes them) and save it in `out`."""
    from transformers import AutoModelForCausalLM

    from specsched.runtime.apps.drafts.training.feature_data import features
    from specsched.runtime.apps.drafts.training.feature_train import FeatureTrainConfig, train
    from specsched.runtime.models.feature_draft import new_feature_draft, save_feature_draft
    from specsched.runtime.models.feature_lean import outlier_channels

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    vocab = int(model.config.vocab_size)
    prompts = torch.randint(2, vocab, (32, 5))
    with torch.inference_mode():
        out_ids = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=24,
                                 do_sample=True, top_k=0, top_p=1.0, eos_token_id=None, pad_token_id=0)
    records = features(model, [{"ids": row.to(torch.int32), "start": 5} for row in out_ids], rows=8)
    draft = new_feature_draft(target, torch.arange(vocab), seed=seed).grow(layers)
    train(draft, records, FeatureTrainConfig(steps=steps, batch=8, max_len=64, warmup=5, lr=3e-3), log=lambda m: None)
    draft.cfg.outlier_dims = outlier_channels([r["feats"] for r in records], ratio=2.0, most=4)
    save_feature_draft(draft, out)
    return out


def chat_target(tmp_path):
    """The tiny preset's target with a chat template (the teacher's prompts are chats)."""
    from specsched.runtime.models.registry import ASSETS

    target = tmp_path / "target"
    shutil.copytree(ASSETS / "tiny" / "target", target)
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    return target


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The tiny target of the tests and, as its draft, a feature draft trained on it here."""
    from tests.tiny_hf import make_pair

    root = tmp_path_factory.mktemp("feature")
    target, _ = make_pair(root)
    return target, make_feature_draft(target, root / "feature-draft")


@pytest.fixture(scope="module")
def pair2(pair, tmp_path_factory):
    """The same target with a feature draft of two decoder layers."""
    return pair[0], make_feature_draft(pair[0], tmp_path_factory.mktemp("feature2") / "draft", layers=2)


def feature_model(pair):
    """The worker's view of a pair's feature draft."""
    from specsched.runtime.backends.feature import FeatureModel

    return FeatureModel(pair[1], pair[0])


@pytest.fixture(scope="module")
def narrow_pair(pair, tmp_path_factory):
    """The same target with the pair's draft restricted to half its vocabulary, the ids in no order: its chains
    are drawn over those ids alone (feature_chain.py), and the target's other tokens come from the residual."""
    from specsched.runtime.models.feature_draft import load_feature_draft, save_feature_draft, target_parts

    draft = load_feature_draft(pair[1], pair[0])
    head = target_parts(pair[0])[1]
    ids = torch.randperm(len(head), generator=torch.Generator().manual_seed(0))[: len(head) // 2]
    draft.use_vocab(ids, head)
    out = tmp_path_factory.mktemp("narrow") / "draft"
    save_feature_draft(draft, out)
    return pair[0], out


@pytest.fixture(scope="module")
def sharp_pair(narrow_pair, tmp_path_factory):
    """narrow_pair's draft proposing from q = softmax(2 z / T): a q far from the one it was trained to, which the
    verifier must accept against as sent."""
    from specsched.runtime.models.draft_files import FEATURE_CONFIG

    out = tmp_path_factory.mktemp("sharp") / "draft"
    shutil.copytree(narrow_pair[1], out)
    config = out / FEATURE_CONFIG
    config.write_text(json.dumps({**json.loads(config.read_text()), "sharpness": 2.0}))
    return narrow_pair[0], out
