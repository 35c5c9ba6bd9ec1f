"""The feature draft's inference forward on the CPU, written out: the same math as `FeatureDraft.step`
and `FeatureDraft.logits`, with int8 matrices and fewer calls.

At batch 1 a draft step reads every weight once, so its time follows the weight bytes: the fp32 module
reads ~27 MB a step (fc 2.6, a layer 13.8, the 4,096 LM-head rows 9.4), the target's forward ~0.5 GB.
Here each layer's four matrices and the LM-head rows are int8 with one scale per output row
(`lean_forward.Int8Linear`: activations quantised per token, so a row's result does not depend on the
other rows of its call, bit for bit, and a restarted draft proposes the same q). What stays fp32, and why:

- fc's feature half, W_g (576 x 576): the target's features have outlier dimensions (a few coordinates
  tens of times the RMS), and a per-token activation scale set by them would leave the other coordinates
  a handful of int8 levels;
- fc's embedding half: E(t) W_eᵀ + b is a row per token id, computed once and kept (as the distilled
  draft's lean forward keeps its projected embedding rows);
- the LM head's columns for the predicted feature's outlier channels (`outlier_dims`, found in the
  training data's features by `outlier_channels`): f̂ inherits the target's few massive channels
  (measured on SmolLM2-135M: two channels at ~14x the mean |f|), so the head is split as in LLM.int8():
  logits = f̂[O] W[:, O]ᵀ (fp32) + f̂[~O] W[:, ~O]ᵀ (int8). Measured on the shipped draft, top-1 agreement
  with the fp32 module over a greedy answer: 0.91 with the whole head int8, 0.97 with it fp32. A draft
  whose config names no outlier channels keeps the whole head fp32.

RMSNorm's sqrt(n) is folded into the matrix after it (a uniform scale leaves each int8 row's
quantisation unchanged): RMSNorm(x) W = x · rsqrt(Σx² + n·ε) · w · (sqrt(n) W).
The draft's precision cannot touch losslessness: the verifier accepts against the q the draft used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .feature_draft import Past
from .feature_layer import KV, attend
from .lean_forward import MAX_ROWS, Dense, Int8Linear


class SplitLinear:
    """x Wᵀ with the input's outlier channels O in fp32 and the rest in int8 (LLM.int8()'s decomposition):
    x[O] W[:, O]ᵀ + x[~O] W[:, ~O]ᵀ. With no O it is one int8 matrix."""

    def __init__(self, weight: torch.Tensor, wide: list[int]) -> None:
        w = weight.detach().float()
        rest = torch.ones(w.shape[1], dtype=torch.bool)
        rest[wide] = False
        self.wide, self.rest = torch.tensor(sorted(wide), dtype=torch.long), rest.nonzero().flatten()
        self.fp32 = Dense(w[:, self.wide]) if wide else None
        self.int8 = Int8Linear(w[:, self.rest] if wide else w)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp32 is None:
            return self.int8(x)
        return self.int8(x[..., self.rest]) + self.fp32(x[..., self.wide])


class LeanLayer:
    """One decoder layer's matrices for the int8 forward (feature_layer.DecoderLayer's math)."""

    @torch.no_grad()
    def __init__(self, layer, root_n: float, wide: list[int]) -> None:  # a DecoderLayer
        # the residual stream carries the outlier channels: the matrices that read it split them off
        self.attn_norm = layer.attn_norm.weight.detach().float()
        self.qkv = SplitLinear(layer.qkv.weight * root_n, wide)
        self.o = Int8Linear(layer.o.weight)
        self.mlp_norm = layer.mlp_norm.weight.detach().float()
        self.gate_up = SplitLinear(layer.gate_up.weight * root_n, wide)
        self.down = Int8Linear(layer.down.weight)


class LeanFeatureDraft:
    """Copies of a FeatureDraft's weights laid out for the int8 forward; rebuild it after training."""

    @torch.no_grad()
    def __init__(self, draft) -> None:  # a FeatureDraft
        cfg = self.cfg = draft.cfg
        d = cfg.hidden
        wide = list(cfg.outlier_dims)
        self.embed = draft.embed
        fc = draft.fc.weight.detach().float()
        self.fc_feature = Dense(fc[:, :d])
        self.fc_embed = Dense(fc[:, d:])
        self.fc_bias = draft.fc.bias.detach().float()
        self.rows: dict[int, torch.Tensor] = {}
        self.layers = [LeanLayer(layer, d**0.5, wide) for layer in draft.layers]
        self.out_norm = draft.out_norm.weight.detach().float()
        self.head = SplitLinear(draft.lm_rows, wide) if wide else Dense(draft.lm_rows.detach().float())
        self.n_eps = d * cfg.rms_norm_eps
        self.q_width = cfg.heads * cfg.head_dim
        self.kv_width = cfg.kv_heads * cfg.head_dim
        hd = cfg.head_dim
        self.inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        self.cos = self.sin = torch.empty(0, hd)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # RMSNorm(x) / sqrt(n)
        return x * (x * x).sum(-1, keepdim=True).add_(self.n_eps).rsqrt_() * w

    def _embed_rows(self, tokens: torch.Tensor) -> torch.Tensor:
        """E(t) W_eᵀ + b for each token [T] -> [T, d]; rows are kept for the ids seen (at most MAX_ROWS)."""
        out = []
        for t in tokens.tolist():
            row = self.rows.get(t)
            if row is None:
                row = self.fc_embed(self.embed[t]) + self.fc_bias
                if len(self.rows) < MAX_ROWS:
                    self.rows[t] = row
            out.append(row)
        return torch.stack(out)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos(p f) and sign · sin(p f) [T, hd] (sign -1 on the first half), from tables grown by doubling:
        rope(x) = x cos + roll(x, hd/2) sign sin, since roll([a, b]) = [b, a] and rotate_half = [-b, a]."""
        n = int(positions.max()) + 1
        if n > self.cos.shape[0]:
            freqs = torch.arange(max(2 * n, 512), dtype=torch.float32)[:, None] * self.inv_freq
            half = freqs.shape[1]
            sign = torch.cat((-torch.ones(half), torch.ones(half)))
            emb = torch.cat((freqs, freqs), dim=-1)
            self.cos, self.sin = emb.cos(), emb.sin() * sign
        return self.cos[positions], self.sin[positions]

    @torch.inference_mode()
    def step(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
             past: Past | None = None, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, Past]:
        """As FeatureDraft.step, for one sequence (B = 1): f̂ [1, T, d] and the new cache, one (keys, values)
        per layer."""
        c = self.cfg
        x = self.fc_feature(features[0].float()) + self._embed_rows(tokens[0])  # [T, d]
        cos, sin = self._rope(positions[0])
        caches = []
        for i, layer in enumerate(self.layers):
            x, kv = self._layer(layer, x, cos, sin, None if past is None else past[i], mask)
            caches.append(kv)
        pred = x * x.pow(2).mean(-1, keepdim=True).add_(c.rms_norm_eps).rsqrt_() * self.out_norm
        return pred[None], tuple(caches)

    def _layer(self, layer: LeanLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: KV | None,
               mask: torch.Tensor | None) -> tuple[torch.Tensor, KV]:
        c = self.cfg
        t, hd = x.shape[0], c.head_dim
        qkv = layer.qkv(self._rms(x, layer.attn_norm))
        qk = qkv[:, :self.q_width + self.kv_width].view(t, -1, hd)  # q heads then k heads, rotated together
        qk = torch.addcmul(qk * cos[:, None], qk.roll(hd // 2, -1), sin[:, None])
        q = qk[:, :c.heads].transpose(0, 1)[None]
        k = qk[:, c.heads:].transpose(0, 1)[None]
        v = qkv[:, self.q_width + self.kv_width:].view(t, c.kv_heads, hd).transpose(0, 1)[None]
        a, kv = attend(q, k, v, past, mask)
        x = x + layer.o(a[0].transpose(0, 1).reshape(t, -1))
        gate, up = layer.gate_up(self._rms(x, layer.mlp_norm)).chunk(2, dim=-1)
        return x + layer.down(F.silu(gate).mul_(up)), kv

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [T, draft_vocab] from predicted features [T, d]."""
        return self.head(predicted)


def outlier_channels(features: list[torch.Tensor], *, ratio: float = 4.0, most: int = 16) -> list[int]:
    """The channels whose mean |f| over these features [n, d] is at least `ratio` times the mean over all
    channels, largest first, at most `most`: the ones the int8 LM head keeps in fp32."""
    x = torch.cat([f.float() for f in features])
    size = x.abs().mean(0)
    order = size.argsort(descending=True)[:most]
    return [int(c) for c in order if size[c] >= ratio * size.mean()]
