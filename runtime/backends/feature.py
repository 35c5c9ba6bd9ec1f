"""The feature draft (runtime/models/feature_draft.py) as a LanguageModel: what a draft worker runs.

Its cache is the drafter's usual token tree, plus what a feature draft needs: the target's true features
of the verified prefix (`truth`, from the verdicts) and, per entry, the feature it predicted (`outs`) and
whether it read a true feature (`true_in`). The input feature of a new entry e whose parent is a:

- a plain read (the committed context, `parents` None): f_a = truth[a], the target's own;
- a drafted token (`parents` given, a tree level or a chain step): f̂_a = outs[a], the draft's prediction
  (EAGLE's feedback), so an entry read that way is not a true one.

`sync_to` therefore rolls back to the first entry that did not read a true feature, so what was accepted
is read again with the target's features (one forward over the new verdict's tokens). Until the verdicts
have brought the features of the whole context (a new sequence, a restarted worker) `can_draft` is
False and the drafter proposes nothing: the verifier's answer to an empty draft carries them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..core.device import device_chains
from ..core.wire import ProtocolError
from ..models.feature_draft import FeatureDraft, Past, load_feature_draft
from ..models.feature_lean import LeanFeatureDraft
from ..models.growing_rows import appended
from ..models.lean_forward import int8_available
from . import feature_chain
from .backend import ChainPlan, DraftedChain, LanguageModel, common_prefix
from .cache import Cache


class FeatureCache(Cache):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.kv: Past | None = None  # per layer (keys, values), [1, kv heads, entries, head_dim] each
        self.outs = torch.zeros((0, hidden))                      # f̂ of each entry
        self.true_in: list[bool] = []
        self.truth = torch.zeros((0, hidden))                     # f_0.. of the verified prefix


class FeatureModel(LanguageModel):
    def __init__(self, path: str | Path, target_dir: str | Path, *, threads: int | None = None) -> None:
        self.draft: FeatureDraft = load_feature_draft(Path(path), Path(target_dir))
        self._adopt()
        if threads:
            torch.set_num_threads(threads)

    @classmethod
    def of(cls, draft: FeatureDraft) -> FeatureModel:
        """A feature draft already in memory (a test's, one being trained)."""
        model = cls.__new__(cls)
        model.draft = draft.eval()
        model._adopt()
        return model

    def _adopt(self) -> None:
        # the int8 forward (models/feature_lean.py) for an fp32 draft on the CPU that asks for it, where this
        # torch has fbgemm
        weight = self.draft.fc.weight
        cpu32 = weight.device.type == "cpu" and weight.dtype == torch.float32
        self.lean = LeanFeatureDraft(self.draft) if self.draft.cfg.int8 and cpu32 and int8_available() else None
        self.vocab_size = int(self.draft.cfg.target_vocab)
        self.eos_token_id = None  # it proposes, it never ends a text
        self.hidden = int(self.draft.cfg.hidden)
        self.sharpness = float(self.draft.cfg.sharpness)  # β of q = softmax(β z / T), fitted to the draft
        # its rows' ids in increasing order (`narrow` puts them so): a chain is drawn over these (feature_chain.py)
        ids = self.draft.vocab_ids.cpu()
        if len(ids.unique()) != len(ids) or int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            raise ValueError(f"this feature draft's vocabulary is not {len(ids)} distinct ids of the target's "
                             f"{self.vocab_size}")
        self.order = None if bool((ids[1:] > ids[:-1]).all()) else ids.argsort()
        self.support = (ids if self.order is None else ids[self.order]).numpy().astype(np.int32)
        self.draws_chains = device_chains() != "0"  # 0: through TreeDrafter's loop, to time one against the other

    def set_threads(self, n: int) -> None:
        if n > 0 and n != torch.get_num_threads():
            torch.set_num_threads(n)

    def new_cache(self) -> FeatureCache:
        return FeatureCache(self.hidden)

    # -- the features the verdicts bring ---------------------------------------------------------------
    def features_held(self, cache: FeatureCache) -> int:
        return len(cache.truth)

    def take_features(self, cache: FeatureCache, start: int, rows: np.ndarray) -> None:
        """Rows of the target's features from prefix position `start` on (earlier ones kept)."""
        rows = np.asarray(rows, np.float32)
        if not 0 <= start <= len(cache.truth) or rows.ndim != 2 or rows.shape[1] != self.hidden:
            raise ProtocolError(f"verdict features {rows.shape} from position {start}: this draft holds "
                                f"{len(cache.truth)} rows {self.hidden} wide")
        cache.truth = appended(cache.truth[:start], torch.from_numpy(rows), 0)
        for e in range(start + 1, len(cache.true_in)):  # entries that read a feature now replaced
            cache.true_in[e] = False

    def can_draft(self, cache: FeatureCache, context: Sequence[int]) -> bool:
        return len(cache.truth) >= len(context) - 1

    # -- reading -----------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, cache: FeatureCache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        if not tokens:
            return np.zeros((0, self.vocab_size), np.float32)
        small = self.read(cache, list(tokens), None if parents is None else list(parents), first_row)
        full = torch.full((small.shape[0], self.vocab_size), float("-inf"))
        full.scatter_(-1, self.draft.vocab_ids.expand_as(small), small)
        return full.numpy()

    def narrow(self, cache: FeatureCache, tokens: list[int], parents: list[int] | None = None) -> np.ndarray:
        """As forward's last row, over the draft's own ids alone (`support`, increasing): [S] logits, every
        other id's being -inf."""
        small = self.read(cache, tokens, parents, len(tokens) - 1)[0]
        return (small if self.order is None else small[self.order]).numpy()

    @torch.inference_mode()
    def read(self, cache: FeatureCache, tokens: list[int], parents: list[int] | None,
             first_row: int) -> torch.Tensor:
        """Read `tokens` into the cache: the drafting logits β z over the draft vocabulary [T - first_row,
        draft_vocab] (β the draft's `sharpness`)."""
        base = len(cache)
        wanted = self._inputs(cache, base, tokens, parents)
        if wanted is None:  # a plain read past the known features: one entry at a time (each reads the last f̂)
            return torch.cat([self.read(cache, [t], None, 0) for t in tokens])[first_row:]
        inputs, true_in = wanted
        causal = cache.plain(parents) is None  # a continuation of a plain sequence: no tree mask needed
        cache.append(tokens, parents)
        mask = None if causal else torch.from_numpy(cache.visibility(base))[None, None]  # [1, 1, T, entries]
        positions = torch.tensor([cache.positions[base:]])
        ids = torch.tensor([tokens])
        model = self.lean or self.draft
        pred, cache.kv = model.step(inputs[None], ids, positions, cache.kv, mask)
        cache.outs = appended(cache.outs, pred[0], 0)
        cache.true_in += true_in
        logits = model.logits(pred[0, first_row:])
        return logits if self.sharpness == 1.0 else logits * self.sharpness

    def draft_chain(self, cache: FeatureCache, tokens: Sequence[int], plan: ChainPlan) -> DraftedChain:
        return feature_chain.draft_chain(self, cache, tokens, plan)

    def _inputs(self, cache: FeatureCache, base: int, tokens: list[int],
                parents: list[int] | None) -> tuple[torch.Tensor, list[bool]] | None:
        """The feature each new entry reads, and whether it is the target's; None when a plain read needs a
        prediction made within the same call."""
        rows, true_in = [], []
        for j in range(len(tokens)):
            a = (base + j - 1) if parents is None else int(parents[j])
            if a < 0:
                rows.append(torch.zeros(self.hidden))
                true_in.append(True)
            elif parents is None and a < len(cache.truth):
                rows.append(cache.truth[a])
                true_in.append(True)
            elif a < base:
                rows.append(cache.outs[a])
                true_in.append(False)
            else:
                return None
        return torch.stack(rows), true_in

    def keep(self, cache: FeatureCache, indices: Sequence[int]) -> None:
        indices = list(indices)
        idx = torch.tensor(indices, dtype=torch.long)
        if cache.kv is not None:
            cache.kv = tuple((k.index_select(2, idx), v.index_select(2, idx)) for k, v in cache.kv)
        cache.outs = cache.outs.index_select(0, idx)
        cache.true_in = [cache.true_in[i] for i in indices]
        cache.select(indices)

    def crop(self, cache: FeatureCache, length: int) -> None:
        if length < len(cache):
            if cache.kv is not None and cache.linear:
                cache.kv = tuple((k[:, :, :length], v[:, :, :length]) for k, v in cache.kv)
                cache.outs, cache.true_in = cache.outs[:length], cache.true_in[:length]
                cache.select(range(length))
                return
            self.keep(cache, range(length))

    def sync_to(self, cache: FeatureCache, committed: Sequence[int]) -> list[int]:
        """As LanguageModel.sync_to, but an entry that read a predicted feature is read again."""
        if not cache.linear:
            raise RuntimeError("sync_to needs a plain-sequence cache: collapse the tree with keep() first")
        keep = common_prefix(cache.tokens, committed)
        if False in cache.true_in[:keep]:
            keep = cache.true_in.index(False)
        if keep == len(committed):
            keep -= 1
        self.crop(cache, keep)
        return list(committed[keep:])
