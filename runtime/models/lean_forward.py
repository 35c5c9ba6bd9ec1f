"""The draft's inference forward, written out: the same Llama math as `LlamaModel`, a fraction of the calls.

A 2-layer, 360-wide draft does ~5 M multiply-adds per token - tens of microseconds of arithmetic on
one core - so its cost is the framework's per-call overhead (mask builders, rotary module, output
classes). The issue's bar is a draft forward <= 1/30 of a target forward; this path is what meets it.
Training keeps the transformers modules (autograd, no cache); both read the same weights, and a test
checks they agree.

Per layer, with x the residual stream, RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w:
    h = RMSNorm(x);  q, k, v = h Wq, h Wk, h Wv;  q, k = rope(q, pos), rope(k, pos)
    x = x + softmax(q K^T / sqrt(d) + mask) V Wo          (K, V: cache + new; GQA: heads share kv heads)
    h = RMSNorm(x);  x = x + (silu(h Wg) * h Wu) Wd
rope(x, p) = x cos(p f) + rotate_half(x) sin(p f), f_i = theta^(-2i/d), rotate_half([a, b]) = [-b, a].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache


class LeanDraft:
    """Read-only views of a DraftLM's weights, laid out for the lean forward."""

    @torch.no_grad()
    def __init__(self, model) -> None:  # a DraftLM (not imported: it imports this module)
        cfg = model.cfg
        self.cfg = cfg
        # embed then proj_in is one lookup in the product table: x = E[id] Wp^T = (E Wp^T)[id]
        self.embed = model.embed.weight @ model.proj_in.weight.T
        # Weights stored [in, out] and contiguous (a 1-row matmul against a transposed view is ~30 %
        # slower here), q/k/v fused into one matmul and gate/up into another: fewer, larger calls.
        self.layers = []
        for layer in model.core.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).T.contiguous()
            gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight]).T.contiguous()
            self.layers.append(
                (
                    layer.input_layernorm.weight.detach(),
                    qkv,
                    a.o_proj.weight.T.contiguous(),
                    layer.post_attention_layernorm.weight.detach(),
                    gate_up,
                    m.down_proj.weight.T.contiguous(),
                )
            )
        self.norm = model.core.norm.weight.detach()
        self.head = model.head.weight.T.contiguous()
        self.splits = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim)
        d = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.eps = cfg.rms_norm_eps
        self.group = cfg.heads // cfg.kv_heads

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[..., None] * self.inv_freq  # [B, T, d/2]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # [B, 1, T, d]
        return emb.cos(), emb.sin()

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    @torch.inference_mode()
    def __call__(
        self, ids: torch.Tensor, positions: torch.Tensor, cache: Cache, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits over the draft vocabulary [B, T, draft_vocab]; `cache` (a transformers Cache) grows by T.

        mask: bool [B, 1, T, past + T], True where a query may attend; None = causal after the cache.
        """
        cfg, (b, t) = self.cfg, ids.shape
        x = self.embed[ids].to(self.head.dtype)
        cos, sin = self._rope(positions)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        causal = mask is None and t > 1
        for i, (w_in, w_qkv, wo, w_post, w_gu, wd) in enumerate(self.layers):
            q, k, v = (self._rms(x, w_in) @ w_qkv).split(self.splits, dim=-1)
            q = q.view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
            k = k.view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            v = v.view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            k, v = cache.update(self._rotate(k, cos, sin), v, i)
            q = self._rotate(q, cos, sin)
            gqa = self.group > 1  # query heads share kv heads without copying them
            if causal and k.shape[2] > t:  # a causal block after cached entries: explicit mask
                past = k.shape[2] - t
                allowed = torch.ones(t, past + t, dtype=torch.bool).tril(past)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=gqa)
            else:
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
            x = x + o.transpose(1, 2).reshape(b, t, -1) @ wo
            gate, up = (self._rms(x, w_post) @ w_gu).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ wd
        return self._rms(x, self.norm) @ self.head
