"""The shipped `tiny` preset: small, trained, usable by name from the CLI, and lossless end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specsched.runtime.apps.drafts.training.tiny import ASSET_DIR, RECORD
from specsched.runtime.apps.drafts.training.tiny_train import Schedule, cross_entropy, train
from specsched.runtime.apps.run.app import run
from specsched.runtime.backends.hf_pair import HFTokenizer
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine
from specsched.runtime.models.registry import resolve_pair

PROMPTS = ["LEONTES.\nGood Paulina,\n", "CLOWN.\nI will tell thee, shepherd, what the king's"]
# From the held-out end of The Winter's Tale: text the models never trained on.
PASSAGE = ("LEONTES.\n My true Paulina,\nWe shall not marry till thou bidd'st us.\n\nPAULINA.\n That\n"
           "Shall be when your first queen's again in breath;\nNever till then.\n\n[Enter a GENTLEMAN.]\n\n"
           "GENTLEMAN.\nOne that gives out himself Prince Florizel,\nSon of Polixenes, with his princess,--she\n"
           "The fairest I have yet beheld,--desires access\nTo your high presence.\n")


def _run(**kw) -> list[list[int]]:
    kw.setdefault("max_new_tokens", 24)
    record = run(RunConfig.of(backend="hf", target="tiny", prompts=PROMPTS, **kw))
    assert record.status == "ok", record.error
    return [s.tokens for s in record.sequences]


def test_shipped_pair_is_complete_and_under_5_mb():
    for role in ("target", "draft"):
        names = {p.name for p in (ASSET_DIR / role).iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", RECORD} <= names, role
        assert json.loads((ASSET_DIR / role / "config.json").read_text())["dtype"] == "bfloat16"
    total = sum(p.stat().st_size for p in ASSET_DIR.rglob("*") if p.is_file())
    assert total <= 5_000_000


def test_preset_name_resolves_to_the_shipped_pair():
    pair = (ASSET_DIR / "target", ASSET_DIR / "draft")
    assert resolve_pair("tiny", None) == pair
    assert resolve_pair(None, "tiny") == pair


@pytest.mark.parametrize("target, draft", [("tiny", "tiny"), ("tiny", None), (None, "tiny")])
def test_every_way_of_naming_the_preset_gives_the_shipped_pair(target, draft):
    from specsched.runtime.backends.hf_pair import HFBackend

    paths = HFBackend(RunConfig(backend="hf", target=target, draft=draft)).paths()
    assert [Path(p) for p in paths] == [ASSET_DIR / "target", ASSET_DIR / "draft"]


def test_tokenizer_round_trips_and_sends_prompts_raw():
    tok = HFTokenizer(str(ASSET_DIR / "target"))
    text = PASSAGE + "Naïve café — ‘quoth’ 🙂\n\tend"
    ids = tok.encode(text, chat=True)
    assert ids == tok.encode(text, chat=False)  # no chat template: nothing wraps the prompt
    assert max(ids) < 1024 and tok.decode(ids) == text


@torch.inference_mode()
def test_the_pair_is_trained_and_the_draft_follows_the_target():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "target")
    ids = torch.tensor([tok.encode(PASSAGE)])
    target, draft = (AutoModelForCausalLM.from_pretrained(ASSET_DIR / r, dtype=torch.float32) for r in
                     ("target", "draft"))
    assert cross_entropy(target, ids).item() < 4.5  # uniform over 1,024 tokens would be 6.93 nats
    agree = (target(ids).logits.argmax(-1) == draft(ids).logits.argmax(-1)).float().mean().item()
    assert agree > 0.4


@pytest.fixture(scope="module")
def ar():
    """Target-only decoding of PROMPTS on the preset: what every greedy run is held to."""
    return _run(mode="ar")


def test_greedy_speculative_output_equals_target_only_output(tmp_path, ar):
    assert all(len(t) == 24 or t[-1] == 0 for t in ar)
    out = subprocess.run(
        [sys.executable, "-m", "specsched", "run", "--backend", "hf", "--target", "tiny", "--mode", "seed",
         "--temperature", "0", "--max-new-tokens", "24", "--json", str(tmp_path / "run.json"), "--quiet",
         "--no-live", *(a for p in PROMPTS for a in ("--prompt", p))],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    record = json.loads((tmp_path / "run.json").read_text())
    assert [s["tokens"] for s in record["sequences"]] == ar


def test_sampled_run_with_only_the_draft_named_accepts_some_drafts():
    record = run(RunConfig.of(backend="hf", draft="tiny", prompts=PROMPTS, mode="seed", temperature=1.0, seed=3,
                              max_new_tokens=24))
    assert record.status == "ok", record.error
    assert 0 < record.metrics.acceptance_rate < 1
    assert all(len(s.tokens) == 24 or s.tokens[-1] == 0 for s in record.sequences)
    assert all(s.text.strip() for s in record.sequences)


def test_models_list_shows_the_tiny_preset(tmp_path):
    env = {**os.environ, "SPECSCHED_CACHE": str(tmp_path), "COLUMNS": "200"}
    out = subprocess.run([sys.executable, "-m", "specsched", "models", "list"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if " tiny " in line)
    assert "tiny/target: shipped" in row and "tiny/draft: shipped" in row


def _micro_run(tmp: Path, fail_at: int | None) -> tuple[dict[str, torch.Tensor], int]:
    """Four training steps of a micro model, checkpointed after every step; (weights, steps run here)."""
    from specsched.runtime.apps.drafts.training.tiny import new_model

    model = new_model(dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           num_key_value_heads=1), vocab=64, eos=0, seed=0)
    calls = 0

    def loss(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        if calls == fail_at:
            raise KeyboardInterrupt  # the run is killed mid-training
        return cross_entropy(m, ids)

    stream = torch.arange(500) % 64
    tmp.mkdir(exist_ok=True)
    train(model, loss, stream, Schedule(steps=4, lr=1e-2, batch=2, seq_len=8, warmup=1, ckpt_every_s=0),
          tmp / "ckpt.pt", log=lambda _msg: None)
    return model.state_dict(), calls


def test_interrupted_training_resumes_to_the_same_weights(tmp_path):
    straight, _ = _micro_run(tmp_path / "a", None)
    with pytest.raises(KeyboardInterrupt):
        _micro_run(tmp_path / "b", fail_at=3)
    resumed, steps = _micro_run(tmp_path / "b", None)
    assert steps == 2  # steps 3 and 4 only: it resumed from the checkpoint of step 2
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_pct_trees_and_stepping_aside_keep_the_target_tokens_on_real_models(ar):
    """Greedy, the tiny transformers pair: PCT (batched and not) and stepping aside give `ar`'s tokens."""
    with Engine(RunConfig(backend="hf", target="tiny", prompts=PROMPTS, max_new_tokens=24)) as e:  # one for both
        for settings in (dict(tree="pct"), dict(tree="pct", policy="batch", max_batch=0, step_aside="on")):
            record = e.generate(mode="seed", **settings)
            assert record.status == "ok", record.error
            assert [s.tokens for s in record.sequences] == ar, settings
