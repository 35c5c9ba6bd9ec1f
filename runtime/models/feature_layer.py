"""The decoder layer of the feature draft (feature_draft.py): a Llama layer at the target's width, with grouped
KV heads and rotary positions, and the attention over a cache that the draft's trees and rollbacks reuse.

    x ← x + W_o · Attention(RoPE(W_q n₁(x)), RoPE(W_k n₁(x)), W_v n₁(x))     n = RMSNorm
    x ← x + W_down · (SiLU(W_gate n₂(x)) ⊙ W_up n₂(x))

With W_o = W_down = 0 the layer is the identity: a draft grown by such a layer (FeatureDraft.grow)
proposes exactly what it did before, and training moves it from there.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .growing_rows import appended

KV = tuple[torch.Tensor, torch.Tensor]  # one layer's (keys, values), each [B, kv heads, entries, head_dim]


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, halves convention (Llama's): x·cos + rotate_half(x)·sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
                 eps: float) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.attn_norm = RMSNorm(hidden, eps)
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.o = nn.Linear(heads * head_dim, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden, eps)
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: KV | None,
                mask: torch.Tensor | None) -> tuple[torch.Tensor, KV]:
        """x [B, T, d] with its rotary tables cos, sin [B, 1, T, head_dim]; `past` this layer's cache;
        `mask` [B, 1, T, L + T] bool (True: may attend) or None (causal, after all of `past`)."""
        b, t, _ = x.shape
        hd = self.head_dim
        q, k, v = self.qkv(self.attn_norm(x)).split([self.heads * hd, self.kv_heads * hd, self.kv_heads * hd],
                                                    dim=-1)
        q = rope(q.view(b, t, self.heads, hd).transpose(1, 2), cos, sin)
        k = rope(k.view(b, t, self.kv_heads, hd).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv_heads, hd).transpose(1, 2)
        a, kv = attend(q, k, v, past, mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), kv

    @torch.no_grad()
    def initialised(self, generator: torch.Generator | None = None) -> DecoderLayer:
        """Fresh weights: inputs at 1/sqrt(fan-in), outputs small (the residual stream starts near x)."""
        for lin in (self.qkv, self.gate_up):
            nn.init.normal_(lin.weight, std=1 / math.sqrt(lin.in_features), generator=generator)
        for lin in (self.o, self.down):
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(lin.in_features), generator=generator)
        return self

    @torch.no_grad()
    def as_identity(self) -> DecoderLayer:
        """The layer with its two output matrices at zero: it returns its input (see the module's note)."""
        self.o.weight.zero_()
        self.down.weight.zero_()
        return self


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: KV | None,
           mask: torch.Tensor | None) -> tuple[torch.Tensor, KV]:
    """Attention of T new entries (q [B, heads, T, hd]; k, v [B, kv, T, hd]) after the cached `past`, and the
    cache grown by them. `mask` [B, 1, T, L + T] bool (True: may attend), or None: causal among the new
    entries, each after all of `past`. Grouped KV heads are shared, not copied."""
    t = q.shape[2]
    if past is not None:  # in place where the cache has room (growing_rows.py)
        k, v = appended(past[0], k, 2), appended(past[1], v, 2)
    causal = mask is None and past is None and t > 1
    if mask is None and past is not None and t > 1:
        n = k.shape[2]
        mask = torch.ones(t, n, dtype=torch.bool, device=k.device).tril(n - t)[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True), (k, v)

