"""The distilled draft: a narrow Llama that reads the target's embeddings and writes a restricted vocabulary.

Two costs dominate a small draft on CPU: its transformer layers and its output layer. The draft keeps
both small:
- it runs at width `hidden` (< the target's 576); the target's frozen token embeddings are mapped in by
  `proj_in` (576 -> hidden), so the 28M embedding parameters are shared with the cached target, not shipped;
- its output layer scores only `vocab_ids`, the most frequent tokens in the target's own output (4,096
  cover ~99% of them). Logits of every other token are -inf, so q(v) = 0 there: speculative sampling
  stays lossless, because the residual max(0, p - q) gives those tokens back their full probability p.

The module quacks like a transformers causal LM: forward(input_ids, past_key_values=..., use_cache=True)
returns an object with full-vocabulary `.logits` [B, T, 49152] and the cache (a DynamicCache; a
GrowingCache unless the caller passes one) in the field transformers names it (growing_cache.cache_out).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .draft_files import CONFIG_FILE, WEIGHTS_FILE, is_distilled_draft
from .growing_cache import CACHE_FIELD, GrowingCache, cache_keyword, cache_out
from .lean_forward import LeanDraft
from .pull import pull


@dataclass(slots=True)
class DraftConfig:
    """Shape of a draft; `target_*` fields must match the target it drafts for."""

    hidden: int = 360  # a multiple of `heads` (transformers validates it; head_dim is explicit)
    layers: int = 2
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    intermediate: int = 768
    draft_vocab: int = 4096
    target_vocab: int = 49152
    target_hidden: int = 576
    rope_theta: float = 100000.0
    rms_norm_eps: float = 1e-5
    max_positions: int = 8192
    int8: bool = True  # inference on CPU with int8 weights (lean_forward.py); training is always fp32

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if not 0 < self.draft_vocab <= self.target_vocab:
            raise ValueError("draft_vocab must be in (0, target_vocab]")

    def llama(self) -> LlamaConfig:
        # vocab_size=1: the core never embeds ids itself (it receives inputs_embeds).
        return LlamaConfig(
            vocab_size=1,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_positions,
            tie_word_embeddings=False,
        )


class DraftLM(nn.Module):
    """Frozen target embeddings -> proj_in -> Llama core -> restricted head -> full-vocab logits."""

    def __init__(self, cfg: DraftConfig, embeddings: torch.Tensor) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding.from_pretrained(embeddings, freeze=True)  # [target_vocab, target_hidden]
        self.proj_in = nn.Linear(cfg.target_hidden, cfg.hidden, bias=False)
        self.core = LlamaModel(cfg.llama())
        self.head = nn.Linear(cfg.hidden, cfg.draft_vocab, bias=False)
        self.register_buffer("vocab_ids", torch.arange(cfg.draft_vocab), persistent=False)
        # What callers of a transformers model read from `.config`: the full vocabulary, no encoder.
        self.config = cfg.llama()
        self.config.vocab_size = cfg.target_vocab
        self._lean: LeanDraft | None = None

    @property
    def device(self) -> torch.device:
        return self.proj_in.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_in.weight.dtype

    def draft_logits(
        self,
        input_ids: torch.Tensor,
        past_key_values: Cache | None = None,
        use_cache: bool = False,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Cache | None]:
        """Logits over `vocab_ids` only, [B, T, draft_vocab]: the training path."""
        x = self.proj_in(self.embed(input_ids))
        out = self.core(
            inputs_embeds=x,
            use_cache=use_cache,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{cache_keyword(self.core): past_key_values},
        )
        return self.head(out.last_hidden_state), cache_out(out)

    def forward(
        self,
        input_ids: torch.Tensor,
        past_key_values: Cache | None = None,
        use_cache: bool = True,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **_: object,
    ) -> CausalLMOutputWithPast:
        if use_cache and past_key_values is None:
            past_key_values = GrowingCache()
        lean_mask = attention_mask is None or (attention_mask.dim() == 4 and attention_mask.dtype == torch.bool)
        if use_cache and lean_mask and not torch.is_grad_enabled():  # inference: the lean path, same math
            if position_ids is None:
                start = past_key_values.get_seq_length()
                position_ids = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
                position_ids = position_ids.expand(input_ids.shape[0], -1)
            small, cache = self.lean()(input_ids, position_ids, past_key_values, attention_mask), past_key_values
        else:
            small, cache = self.draft_logits(
                input_ids, past_key_values, use_cache, attention_mask=attention_mask, position_ids=position_ids
            )
        full = small.new_full((*small.shape[:-1], self.cfg.target_vocab), float("-inf"))
        full.scatter_(-1, self.vocab_ids.expand_as(small), small)  # 3x faster than full[..., ids] = small
        return CausalLMOutputWithPast(logits=full, **{CACHE_FIELD: cache})

    def lean(self) -> LeanDraft:
        """The inference forward over these weights (built once; `train()` drops it)."""
        if self._lean is None:
            self._lean = LeanDraft(self)
        return self._lean

    # The lean forward holds copies of the weights: whatever may change them drops it, and the next
    # inference call rebuilds it (train/eval, .to() and friends, which go through _apply, load_state_dict).
    def train(self, mode: bool = True) -> DraftLM:
        self._lean = None
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self._lean = None
        return super()._apply(fn, *args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        self._lean = None
        return super().load_state_dict(*args, **kwargs)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Everything except the frozen embeddings (they are reloaded from the target)."""
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("embed.")}
        state["vocab_ids"] = self.vocab_ids
        return state


def save_draft(model: DraftLM, path: Path, *, dtype: torch.dtype = torch.bfloat16, meta: dict | None = None) -> None:
    """Write `draft_config.json` + `draft.safetensors` (trainable weights in `dtype`, ids as int64)."""
    path.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous() for k, v in model.trainable_state().items()}
    save_file(state, str(path / WEIGHTS_FILE), metadata={k: str(v) for k, v in (meta or {}).items()})
    (path / CONFIG_FILE).write_text(json.dumps(asdict(model.cfg), indent=2) + "\n")


def target_embeddings(target_dir: Path) -> torch.Tensor:
    """The target's token embedding matrix, read straight from its safetensors."""
    for file in sorted(target_dir.glob("*.safetensors")):
        tensors = load_file(str(file))
        if "model.embed_tokens.weight" in tensors:
            return tensors["model.embed_tokens.weight"].float()
    raise FileNotFoundError(f"no model.embed_tokens.weight in {target_dir}")


def load_draft(path: Path, dtype: torch.dtype = torch.float32, *, target_dir: Path | None = None) -> DraftLM:
    """Load a saved draft; embeddings come from `target_dir` (default: the cached SmolLM2)."""
    cfg = DraftConfig(**json.loads((Path(path) / CONFIG_FILE).read_text()))
    model = DraftLM(cfg, target_embeddings(target_dir or pull()))
    state = load_file(str(Path(path) / WEIGHTS_FILE))
    model.vocab_ids = state.pop("vocab_ids").long()
    model.load_state_dict(state, strict=False)
    missing = set(model.state_dict()) - set(state) - {"embed.weight"}
    if missing:
        raise KeyError(f"{path}: draft weights missing {sorted(missing)}")
    return model.to(dtype).eval()


def load_model(path: Path, dtype: torch.dtype | None = None, *, target_dir: Path | None = None) -> torch.nn.Module:
    """Load a target or draft directory as a causal LM (a DraftLM for distilled drafts), in eval mode.

    `dtype` defaults to float32; `target_dir` supplies a distilled draft's shared embeddings (default: the
    cached SmolLM2).
    """
    dtype = dtype or torch.float32
    if is_distilled_draft(path):
        return load_draft(path, dtype, target_dir=target_dir)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
