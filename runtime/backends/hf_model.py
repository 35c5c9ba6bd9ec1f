"""The transformers backend's model: any causal LM (or the distilled draft) on its process's placement; the
pair, the tokenizer and the checks before a run are hf_pair.py's.

Each sequence keeps its own DynamicCache (a GrowingCache: appends in place). A forward reads the
cache's unread tokens plus the draft in one call; rollback slices every layer's keys and values back
to the accepted length.
``forward_batch`` (mode ``parallel``) left-pads the per-sequence caches into one batch, runs one
forward with an attention mask that hides the padding, and splits the result back.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from ..models import few_rows
from ..models.draft_files import is_distilled_draft
from ..models.draft_model import DraftLM, load_model
from ..models.growing_cache import GrowingCache, cache_keyword, cache_out
from . import device_chain
from .backend import (
    Cache,
    ChainPlan,
    DraftedChain,
    LanguageModel,
    Traffic,
)
from .placement import Placement

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
        self._hidden: torch.Tensor | None = None
        decoder = None if isinstance(module, DraftLM) else getattr(self.model, "get_decoder", lambda: None)()
        if decoder is not None:  # a target: its features, for drafts that read them (scheduler/features.py)
            decoder.register_forward_hook(self._catch_hidden)
        self.gives_features = decoder is not None
        self.speed_ups = few_rows.for_target(self.model) if decoder is not None else []  # a verification's rows
        self.draws_chains = device_chain.wanted(self.placement.cuda)
        # transformers' causal LMs compute only the last n rows of logits when told (the distilled draft,
        # whose head is small, computes all; the rows wanted are cut out below either way)
        self._keeps_rows = "logits_to_keep" in inspect.signature(module.forward).parameters
        self._cache_keyword = cache_keyword(module)
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
    def forward(self, cache: HFCache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        if not tokens:
            return np.zeros((0, self.vocab_size), np.float32)
        parents = cache.plain(parents)  # a chain said as a tree: the causal forward needs no mask
        if parents is not None or not cache.linear:
            return self.forward_batch([cache], [tokens], [parents], [first_row])[0]
        start = len(cache)
        cache.append(tokens, None)
        up = self.placement.up
        with self.placement.running():
            ids = up(torch.tensor([list(tokens)], dtype=torch.long))
            positions = up(torch.arange(start, start + len(tokens)).unsqueeze(0))
            past, logits, hidden = self._run(ids, positions, None,
                                             cache.past if cache.past is not None else GrowingCache(),
                                             len(tokens) - first_row)
            cache.past = past
            self.features = [self.placement.down(hidden[0])] if hidden is not None else None
            return self.placement.down(_last(logits[0], len(tokens) - first_row))

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, past: DynamicCache,
             rows: int) -> tuple[DynamicCache, torch.Tensor, torch.Tensor | None]:
        """One forward of the model's own: (the cache, logits of the last `rows` rows, and when `want_features`
        the last hidden state of every row, else None). The hidden state is what the decoder hands the LM head,
        caught on its way out (a hook), so the logits stay the model's, whatever it does after the head
        (Gemma2's soft-capping, Granite's scaling)."""
        self._hidden = None
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         **self.with_cache(past), **self.keep_last(rows))
        hidden, self._hidden = self._hidden, None
        return cache_out(out), out.logits, hidden if self.want_features else None

    def _catch_hidden(self, module, args, output) -> None:
        if self.want_features:
            self._hidden = output.last_hidden_state

    def with_cache(self, past: DynamicCache) -> dict:
        """The model's argument for its KV cache (growing_cache.py: transformers renamed it)."""
        return {self._cache_keyword: past}

    def keep_last(self, n: int) -> dict:
        """The model's argument for computing only the last n rows of logits (at least one: 0 means all)."""
        return {"logits_to_keep": max(n, 1)} if self._keeps_rows else {}

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
                      parents: Sequence[Sequence[int] | None] | None = None,
                      first_rows: Sequence[int] | None = None) -> list[np.ndarray]:
        """One forward for several sequences, each a plain continuation or a token tree.

        Row i of the batch is laid out as [pad][its cache][pad][its new tokens]; a boolean 4D mask
        lets every new token see exactly its own ancestors, so padding and other rows are invisible
        and position ids come from each sequence's own cache.
        """
        parents = list(parents) if parents is not None else [None] * len(caches)
        if len(caches) == 1 and caches[0].linear and caches[0].plain(parents[0]) is None:
            # one plain continuation (ar, a chain's verification): its own cache grows in place, where the
            # batch layout below would copy every layer's keys and values twice and build a mask, per forward
            return [self.forward(caches[0], tokens[0], first_row=(first_rows or [0])[0])]
        wanted = [len(t) - f for t, f in zip(tokens, first_rows or [0] * len(caches))]  # rows, last of each
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
            out_past, out_logits, hidden = self._run(up(ids), up(positions), up(allowed), past, max(wanted))
            for i, c in enumerate(caches):
                keep = up(torch.tensor(columns[i], dtype=torch.long))
                c.past = GrowingCache()
                for li, layer in enumerate(out_past.layers):
                    c.past.update(layer.keys[i:i + 1, :, keep], layer.values[i:i + 1, :, keep], li)
            logits = self.placement.down(out_logits)  # the whole batch's rows come down at once
            if hidden is not None:
                rows = self.placement.down(hidden)
                self.features = [rows[i, new_len - len(t):] for i, t in enumerate(tokens)]
            else:
                self.features = None
        return [_last(logits[i], n) for i, n in enumerate(wanted)]

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


def _last(rows: torch.Tensor, n: int) -> torch.Tensor:
    """The last n rows (none when n is 0: rows[-0:] would be all of them)."""
    return rows[rows.shape[0] - n:]
