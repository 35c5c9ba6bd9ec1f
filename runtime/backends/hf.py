"""The transformers backend: any causal-LM pair from local directories (or cached hub ids).

Each sequence keeps its own DynamicCache (a GrowingCache: appends in place). A forward reads the
cache's unread tokens plus the draft in one call; rollback slices every layer's keys and values back
to the accepted length.
``forward_batch`` (mode ``parallel``) left-pads the per-sequence caches into one batch, runs one
forward with an attention mask that hides the padding, and splits the result back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache

from specsched.runtime.backends import device_chain
from specsched.runtime.backends.backend import (
    Backend,
    Cache,
    ChainPlan,
    DraftedChain,
    LanguageModel,
    Tokenizer,
    Traffic,
)
from specsched.runtime.backends.placement import Placement
from specsched.runtime.core.config import ConfigError
from specsched.runtime.models.draft_model import DraftLM
from specsched.runtime.models.growing_cache import GrowingCache

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class HFCache(Cache):
    def __init__(self) -> None:
        super().__init__()
        self.past: DynamicCache | None = None


class HFModel(LanguageModel):
    """A transformers causal LM (or the distilled DraftLM) on its placement's device; every method takes
    and returns host values (token lists, float32 numpy logits)."""

    def __init__(self, path: str, dtype: str, *, target_dir: str | None = None,
                 placement: Placement | None = None) -> None:
        from specsched.runtime.models.registry import is_distilled_draft, load_model

        if is_distilled_draft(Path(path)):  # the project's distilled draft (a DraftLM)
            module = load_model(Path(path), DTYPES[dtype], target_dir=Path(target_dir) if target_dir else None)
        else:
            module = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
        self._adopt(module, placement)

    @classmethod
    def of(cls, module: torch.nn.Module, placement: Placement | None = None) -> HFModel:
        """A model already in memory (a transformers causal LM or a DraftLM), e.g. one being distilled."""
        model = cls.__new__(cls)
        model._adopt(module, placement)
        return model

    def _adopt(self, module: torch.nn.Module, placement: Placement | None) -> None:
        self.placement = placement or Placement()
        self.device = self.placement.name
        self.model = self.placement.adopt(module).eval()
        self.chains_on_device = device_chain.wanted(self.placement.cuda)
        if isinstance(module, DraftLM):  # it proposes, it never ends a text
            self.vocab_size, self.eos_token_id = int(module.cfg.target_vocab), None
            return
        self.vocab_size = int(module.get_output_embeddings().weight.shape[0])
        eos = module.generation_config.eos_token_id
        if eos is None:
            eos = module.config.eos_token_id
        self.eos_token_id = eos[0] if isinstance(eos, list) else eos

    def set_threads(self, n: int) -> None:
        if n > 0 and n != torch.get_num_threads():
            torch.set_num_threads(n)

    @property
    def traffic(self) -> Traffic:
        return self.placement.traffic

    def new_cache(self) -> HFCache:
        return HFCache()

    @torch.inference_mode()
    def forward(self, cache: HFCache, tokens: Sequence[int], parents: Sequence[int] | None = None) -> np.ndarray:
        if not tokens:
            return np.zeros((0, self.vocab_size), np.float32)
        end = len(cache) - 1
        if parents is not None and cache.linear and list(parents) == [*range(end, end + len(tokens))]:
            parents = None  # a chain's next tokens, said as a tree: the causal forward needs no mask
        if parents is not None or not cache.linear:
            return self.forward_batch([cache], [tokens], [parents])[0]
        start = len(cache)
        cache.append(tokens, None)
        up = self.placement.up
        with self.placement.running():
            ids = up(torch.tensor([list(tokens)], dtype=torch.long))
            positions = up(torch.arange(start, start + len(tokens)).unsqueeze(0))
            out = self.model(input_ids=ids, position_ids=positions, use_cache=True,
                             past_key_values=cache.past if cache.past is not None else GrowingCache())
            cache.past = out.past_key_values
            return self.placement.down(out.logits[0])

    def draft_chain(self, cache: HFCache, tokens: Sequence[int], plan: ChainPlan) -> DraftedChain:
        return device_chain.draft_chain(self, cache, tokens, plan)

    def crop(self, cache: HFCache, length: int) -> None:
        if cache.linear and cache.past is not None and length < len(cache):
            cache.past.crop(length - len(cache))  # a slice, no copy (GrowingCache writes over the rest)
            cache.select(range(length))
            return
        super().crop(cache, length)

    def keep(self, cache: HFCache, indices: Sequence[int]) -> None:
        indices = list(indices)
        if cache.past is not None:
            with self.placement.running():
                idx = self.placement.up(torch.tensor(indices, dtype=torch.long))
                for layer in cache.past.layers:
                    layer.keys = layer.keys.index_select(-2, idx)
                    layer.values = layer.values.index_select(-2, idx)
        cache.select(indices)

    @torch.inference_mode()
    def forward_batch(self, caches: Sequence[HFCache], tokens: Sequence[Sequence[int]],
                      parents: Sequence[Sequence[int] | None] | None = None) -> list[np.ndarray]:
        """One forward for several sequences, each a plain continuation or a token tree.

        Row i of the batch is laid out as [pad][its cache][pad][its new tokens]; a boolean 4D mask
        lets every new token see exactly its own ancestors, so padding and other rows are invisible
        and position ids come from each sequence's own cache.
        """
        parents = list(parents) if parents is not None else [None] * len(caches)
        past_len = max(len(c) for c in caches)
        new_len = max(len(t) for t in tokens)
        b = len(caches)
        ids = torch.zeros((b, new_len), dtype=torch.long)
        positions = torch.zeros((b, new_len), dtype=torch.long)
        allowed = torch.zeros((b, 1, new_len, past_len + new_len), dtype=torch.bool)
        columns = []
        for i, (c, t, par) in enumerate(zip(caches, tokens, parents)):
            before, pad = len(c), new_len - len(t)
            c.append(t, par)
            # cache index -> column of the batch layout
            col = [past_len - before + j for j in range(before)] + [past_len + pad + j for j in range(len(t))]
            columns.append(col)
            ids[i, pad:] = torch.tensor(list(t), dtype=torch.long)
            positions[i, pad:] = torch.tensor(c.positions[before:], dtype=torch.long)
            for j in range(pad):  # padding queries see only themselves (no all-masked rows)
                allowed[i, 0, j, past_len + j] = True
            rows_i, cols_i = np.nonzero(c.visibility(before))
            allowed[i, 0, pad + rows_i, np.asarray(col)[cols_i]] = True
        up = self.placement.up
        with self.placement.running():
            past = self._stack([c.past for c in caches], [len(col) - len(t) for col, t in zip(columns, tokens)],
                               past_len)
            out = self.model(input_ids=up(ids), attention_mask=up(allowed), position_ids=up(positions),
                             past_key_values=past, use_cache=True)
            for i, c in enumerate(caches):
                keep = up(torch.tensor(columns[i], dtype=torch.long))
                c.past = GrowingCache()
                for li, layer in enumerate(out.past_key_values.layers):
                    c.past.update(layer.keys[i:i + 1, :, keep], layer.values[i:i + 1, :, keep], li)
            logits = self.placement.down(out.logits)  # the whole batch's rows come down at once
        return [logits[i, new_len - len(t):] for i, t in enumerate(tokens)]

    def _stack(self, pasts: list[DynamicCache | None], lengths: list[int], past_len: int) -> DynamicCache:
        batch = DynamicCache()
        if past_len == 0:
            return batch
        some = next(p for p in pasts if p is not None)
        for li in range(len(some.layers)):
            keys, values = [], []
            empty = some.layers[li].keys[:1, :, :0]  # a sequence with nothing cached yet
            for p, n in zip(pasts, lengths):
                k = p.layers[li].keys if p is not None else empty
                v = p.layers[li].values if p is not None else empty
                pad = (0, 0, past_len - n, 0)  # left-pad the sequence axis
                keys.append(torch.nn.functional.pad(k, pad))
                values.append(torch.nn.functional.pad(v, pad))
            batch.update(torch.cat(keys), torch.cat(values), li)
        return batch


class HFTokenizer(Tokenizer):
    def __init__(self, path: str, *, gguf_file: str | None = None) -> None:
        """A tokenizer directory, or with ``gguf_file`` the tokenizer inside that GGUF in ``path``."""
        self.tok = AutoTokenizer.from_pretrained(path, gguf_file=gguf_file) if gguf_file else \
            AutoTokenizer.from_pretrained(path)

    def encode(self, text: str, *, chat: bool) -> list[int]:
        if chat and getattr(self.tok, "chat_template", None):
            out = self.tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
            return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)
        return list(self.tok.encode(text))

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tok.decode(list(tokens), skip_special_tokens=True)

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()


class HFBackend(Backend):
    def paths(self) -> tuple[str, str]:
        c = self.config
        from specsched.runtime.models.registry import PRESETS, resolve_pair

        if c.target and c.draft and not {c.target, c.draft} & PRESETS.keys():
            return c.target, c.draft  # two model directories (or hub ids) as given
        return resolve_pair(c.target, c.draft)

    def check(self) -> None:
        self.config.model_device  # noqa: B018 - --device cuda without a GPU: one line, before any process
        target, draft = self.paths()
        t, d = self.vocabulary("target"), self.vocabulary("draft")
        if t["size"] != d["size"]:
            raise ConfigError(f"draft and target vocabularies differ: target {target} has {t['size']} "
                              f"tokens, draft {draft} has {d['size']}; speculative decoding needs the "
                              "same tokenizer")
        if t["tokens"] is not None and d["tokens"] is not None and t["tokens"] != d["tokens"]:
            raise ConfigError(f"draft and target tokenizers differ ({target} vs {draft}): "
                              "speculative decoding needs the same vocabulary")

    def vocabulary(self, role: str) -> dict:
        path = self.paths()[0 if role == "target" else 1]
        if not Path(path).exists() and not _looks_like_hub_id(path):
            raise ConfigError(f"{role} model not found: {path}")
        from specsched.runtime.models.registry import is_distilled_draft

        if is_distilled_draft(Path(path)):
            size = _distilled_vocab(Path(path))
        else:
            try:
                size = int(AutoConfig.from_pretrained(path).vocab_size)
            except (OSError, ValueError) as exc:
                reason = str(exc).splitlines()[0]
                raise ConfigError(f"cannot read the {role} model at {path}: {reason}") from None
        return {"size": size, "tokens": tokenizer_digest(path)}

    def tokenizer(self) -> HFTokenizer:
        return HFTokenizer(self.paths()[0])

    def target(self) -> HFModel:
        return HFModel(self.paths()[0], self.config.model_dtype, placement=self.placement())

    def draft(self) -> HFModel:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        return HFModel(self.paths()[1], self.config.model_dtype, target_dir=self.draft_embeddings(),
                       placement=self.placement())

    def draft_embeddings(self) -> str | None:
        """Where a distilled draft reads its shared embeddings: its target's directory (None: the default's)."""
        return self.paths()[0]

    def placement(self) -> Placement:
        """This process's device and stream (--device, resolved here, after the fork)."""
        return Placement(self.config.model_device)


def _distilled_vocab(path: Path) -> int:
    from specsched.runtime.models.draft_model import CONFIG_FILE

    return int(json.loads((path / CONFIG_FILE).read_text())["target_vocab"])


def tokenizer_digest(path: str) -> str | None:
    """sha256 of a tokenizer's vocabulary (token -> id, sorted); None when `path` has no tokenizer."""
    tokens = _tokenizer_vocab(path)
    return None if tokens is None else hashlib.sha256(json.dumps(sorted(tokens.items())).encode()).hexdigest()


def _tokenizer_vocab(path: str) -> dict[str, int] | None:
    try:
        return AutoTokenizer.from_pretrained(path).get_vocab()
    except (OSError, ValueError, TypeError):
        return None


def _looks_like_hub_id(path: str) -> bool:
    return path.count("/") == 1 and not path.startswith((".", "/")) and os.path.sep * 2 not in path
