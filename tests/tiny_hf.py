"""Tiny randomly initialised transformers models, built offline inside the tests.

The pair shares a word-level tokenizer. The draft is the target with noise added to its weights,
so it agrees with the target often but not always - both acceptance and rejection get exercised.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(94)]


def make_tokenizer(path: Path, words: list[str] = WORDS) -> None:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.save_pretrained(path)


def make_model(path: Path, *, vocab: int = len(WORDS), seed: int = 0, noise: float = 0.0,
               base: Path | None = None, layers: int = 2) -> None:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.3, eos_token_id=1, bos_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    if base is not None:
        model.load_state_dict(LlamaForCausalLM.from_pretrained(base).state_dict())
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p) * p.std())
    model.save_pretrained(path)


def make_pair(root: Path, *, noise: float = 0.05, draft_vocab: int | None = None) -> tuple[Path, Path]:
    target, draft = root / "target", root / "draft"
    make_model(target, seed=0)
    make_tokenizer(target)
    if draft_vocab is None:
        make_model(draft, seed=1, noise=noise, base=target)
        make_tokenizer(draft)
    else:
        make_model(draft, seed=1, vocab=draft_vocab)
    return target, draft


def logits_after(target: Path, prompts: list[str], *, chat: bool = True):
    """`logits_after(i, prefix)`: the target's fp32 logits for the token after prompt i + prefix, from one
    fresh forward (tests.fp32.assert_greedy_equal's reference). The model loads on the first call only."""
    from specsched.runtime.backends.hf_model import HFModel
    from specsched.runtime.backends.hf_pair import HFTokenizer

    loaded: list = []

    def after(i: int, prefix: list[int]):
        if not loaded:
            loaded.extend([HFModel(str(target), "fp32"), HFTokenizer(str(target))])
        model, tok = loaded
        return model.forward(model.new_cache(), tok.encode(prompts[i], chat=chat) + list(prefix))[-1]

    return after
