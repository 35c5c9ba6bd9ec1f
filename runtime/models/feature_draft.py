"""The feature draft: a decoder layer (or a few) at the target's width that reads the target's own features
(EAGLE, Li et al. 2024, arXiv:2401.15077), with the restricted output vocabulary of the distilled draft.

Entry e of a sequence reads the pair (g_e, t_e): the token t_e and the target's feature of the position
before it, g_e = f_{e-1} (zeros for e = 0), where f_i is the target's last hidden state after reading
t_0..t_i (the input of its LM head). It predicts f̂_e ≈ f_e, and so the next token:

    x_e   = W_fc [g_e ; E(t_e)]                (a linear layer, 2d -> d; E: the target's embeddings)
    h_e   = DecoderLayers(x_0..x_e)            (`layers` Llama layers at width d, causal, RoPE at position e;
                                              feature_layer.py)
    f̂_e   = RMSNorm(h_e) · w                   (w starts as the target's final-norm weight)
    q_e   = softmax(f̂_e · W_lm[V']ᵀ)            (the target's own LM-head rows, on the draft vocabulary V')

Drafting k tokens feeds f̂ back as the next entry's g. Logits outside V' are -inf, so q(v) = 0 there, and
speculative sampling stays lossless (the residual max(0, p - q) returns their full mass p). Embeddings and
LM-head rows are the target's, read from its directory and not shipped; the file holds fc, the layers, the
output norm and the ids of V'.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from .draft_files import FEATURE_CONFIG, FEATURE_WEIGHTS
from .feature_layer import KV, DecoderLayer, RMSNorm

Past = tuple[KV, ...]  # the draft's cache: one (keys, values) per layer


@dataclass(slots=True)
class FeatureDraftConfig:
    hidden: int = 576          # the target's width: features, embeddings and LM-head rows all have it
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    intermediate: int = 1536
    draft_vocab: int = 4096
    target_vocab: int = 49152
    rope_theta: float = 100000.0
    rms_norm_eps: float = 1e-5
    layers: int = 1            # decoder layers (a config without the field: one)
    int8: bool = True          # inference on the CPU with int8 matrices (feature_lean.py); training is fp32
    outlier_dims: list[int] = field(default_factory=list)  # feature channels the int8 LM head keeps in fp32
    # β: a drafting worker proposes from q = softmax(β · z / T), z = f̂ · W_lm[V']ᵀ (backends/feature.py).
    # Any q is lossless (the verifier accepts against the q sent); β is chosen after training, where
    # benchmarks/draft_sharpness.py finds Σ min(p, q) highest on answers the draft never read. Training reads
    # z unscaled, and a draft trained from --init keeps the init's β.
    sharpness: float = 1.0

    def __post_init__(self) -> None:
        if self.layers < 1:
            raise ValueError("layers must be at least 1")
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if not 0 < self.draft_vocab <= self.target_vocab:
            raise ValueError("draft_vocab must be in (0, target_vocab]")
        if any(not 0 <= d < self.hidden for d in self.outlier_dims) or len(set(self.outlier_dims)) < len(
                self.outlier_dims):
            raise ValueError(f"outlier_dims must be distinct channels in [0, {self.hidden})")
        if not (math.isfinite(self.sharpness) and self.sharpness > 0):
            raise ValueError(f"sharpness must be a finite number above 0, not {self.sharpness}")


class FeatureDraft(nn.Module):
    def __init__(self, cfg: FeatureDraftConfig, embeddings: torch.Tensor, lm_rows: torch.Tensor,
                 vocab_ids: torch.Tensor) -> None:
        super().__init__()
        d, hd = cfg.hidden, cfg.head_dim
        self.cfg = cfg
        self.register_buffer("embed", embeddings.float(), persistent=False)    # [target_vocab, d], frozen
        self.register_buffer("lm_rows", lm_rows.float(), persistent=False)     # [draft_vocab, d], frozen
        self.register_buffer("vocab_ids", vocab_ids.long(), persistent=False)  # [draft_vocab]
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.layers = nn.ModuleList(self.new_layer() for _ in range(cfg.layers))
        self.out_norm = RMSNorm(d, cfg.rms_norm_eps)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        self.register_buffer("inv_freq", inv, persistent=False)

    def new_layer(self) -> DecoderLayer:
        c = self.cfg
        return DecoderLayer(c.hidden, c.heads, c.kv_heads, c.head_dim, c.intermediate, c.rms_norm_eps)

    def body(self, x: torch.Tensor, positions: torch.Tensor, past: Past | None = None,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Past]:
        """The layers over x [B, T, d] at `positions` [B, T]; `past` one (keys, values) per layer; `mask`
        [B, 1, T, L + T] bool (True: may attend) or None for causal over the new tokens (after all of `past`)."""
        angle = positions[:, None, :, None].float() * self.inv_freq  # [B, 1, T, hd/2]
        cos, sin = torch.cat((angle, angle), -1).cos(), torch.cat((angle, angle), -1).sin()
        caches = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, None if past is None else past[i], mask)
            caches.append(kv)
        return x, tuple(caches)

    def step(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             past: Past | None = None, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Past]:
        """Predicted features f̂ [B, T, d] for entries (g = `features`, t = `tokens`), and the new cache."""
        x = self.fc(torch.cat((features, self.embed[tokens]), dim=-1))
        h, kv = self.body(x, positions, past, mask)
        return self.out_norm(h), kv

    def grow(self, layers: int, seed: int = 0) -> FeatureDraft:
        """The draft with identity layers appended up to `layers` (their output matrices at zero, the rest drawn
        as a fresh layer's with `seed`): it proposes exactly what it did, and training takes the new layers
        from there."""
        if layers < len(self.layers):
            raise ValueError(f"a draft of {len(self.layers)} layers cannot shrink to {layers}")
        gen, ref = torch.Generator().manual_seed(seed), self.fc.weight
        while len(self.layers) < layers:
            self.layers.append(self.new_layer().initialised(gen).as_identity().to(ref.device, ref.dtype))
        self.cfg.layers = layers
        return self

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary V' [..., draft_vocab] from predicted features."""
        return predicted @ self.lm_rows.T

    def use_vocab(self, vocab_ids: torch.Tensor, head: torch.Tensor) -> None:
        """Draft over another vocabulary V' (`head`: the target's LM head): no trained weight depends on V', only
        which of the target's rows the logits read."""
        self.vocab_ids = vocab_ids.long().to(self.vocab_ids.device)
        self.lm_rows = head[self.vocab_ids.cpu()].to(self.lm_rows)
        self.cfg.draft_vocab = len(vocab_ids)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        state = {k: v for k, v in self.state_dict().items()}
        state["vocab_ids"] = self.vocab_ids
        return state


# a layer's weights, which a one-layer file from before `layers` names at the top level
ONE_LAYER_NAMES = ("attn_norm.weight", "qkv.weight", "o.weight", "mlp_norm.weight", "gate_up.weight", "down.weight")


def file_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weights named as this draft names them: a file from before `layers` (no `layers.*` key) holds its one
    layer's at the top level (`qkv.weight`), read as `layers.0.qkv.weight`; any other state is as it is."""
    if any(k.startswith("layers.") for k in state):
        return dict(state)
    return {(f"layers.0.{k}" if k in ONE_LAYER_NAMES else k): v for k, v in state.items()}


def layers_in(state: dict[str, torch.Tensor]) -> int:
    """The decoder layers a state dict (file_names') holds weights of; 0 for one that holds none."""
    return 1 + max((int(k.split(".")[1]) for k in state if k.startswith("layers.")), default=-1)


def shifted(feats: torch.Tensor) -> torch.Tensor:
    """g_e = f_{e-1}, g_0 = 0: the features each entry reads, from the target's features [B, T, d]."""
    return torch.cat((torch.zeros_like(feats[:, :1]), feats[:, :-1]), dim=1)


def target_parts(target_dir: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target's token embeddings, LM head (the embeddings when tied) and final-norm weight."""
    wanted = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(Path(target_dir).glob("*.safetensors")):  # only these three: not the 0.5 GB of layers
        with safe_open(str(file), framework="pt") as f:
            tensors.update({k: f.get_tensor(k) for k in wanted & set(f.keys())})
    embed = tensors["model.embed_tokens.weight"].float()
    head = tensors.get("lm_head.weight", embed).float()
    return embed, head, tensors["model.norm.weight"].float()


def new_feature_draft(target_dir: Path, vocab_ids: torch.Tensor, cfg: FeatureDraftConfig | None = None,
                      seed: int = 0) -> FeatureDraft:
    """A fresh draft for the target in `target_dir`: fc starts as [0 ; I]-like mixing of the feature, the
    layers' output matrices small (each layer starts near the identity), the output norm as the target's."""
    embed, head, norm = target_parts(target_dir)
    n_vocab, d = embed.shape
    cfg = cfg or FeatureDraftConfig(hidden=d, target_vocab=n_vocab, draft_vocab=len(vocab_ids))
    torch.manual_seed(seed)
    model = FeatureDraft(cfg, embed, head[vocab_ids], vocab_ids)
    with torch.no_grad():
        for layer in model.layers:
            layer.initialised()
        nn.init.normal_(model.fc.weight, std=0.02 / math.sqrt(2 * d))
        model.fc.weight[:, :d] += torch.eye(d)  # starts by passing the target's feature through
        model.fc.bias.zero_()
        model.out_norm.weight.copy_(norm)
    return model


def save_feature_draft(model: FeatureDraft, path: Path, *, meta: dict | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
             for k, v in model.trainable_state().items()}
    save_file(state, str(path / FEATURE_WEIGHTS), metadata={k: str(v) for k, v in (meta or {}).items()})
    (path / FEATURE_CONFIG).write_text(json.dumps(asdict(model.cfg), indent=2) + "\n")


def load_feature_draft(path: Path, target_dir: Path, dtype: torch.dtype = torch.float32) -> FeatureDraft:
    cfg = FeatureDraftConfig(**json.loads((Path(path) / FEATURE_CONFIG).read_text()))
    state = load_file(str(Path(path) / FEATURE_WEIGHTS))
    vocab_ids = state.pop("vocab_ids").long()
    embed, head, _ = target_parts(target_dir)
    if embed.shape != (cfg.target_vocab, cfg.hidden):
        raise ValueError(f"{path}: drafts for a target with {cfg.target_vocab} tokens of width {cfg.hidden}, "
                         f"but {target_dir} has {tuple(embed.shape)}")
    model = FeatureDraft(cfg, embed, head[vocab_ids], vocab_ids)
    state = file_names(state)
    missing, extra = set(model.state_dict()) - set(state), set(state) - set(model.state_dict())
    if missing or extra:
        raise KeyError(f"{path}: the feature draft's weights do not match its config (layers {cfg.layers}): "
                       f"missing {sorted(missing)}, unexpected {sorted(extra)}")
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.to(dtype).eval()
