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

int8 (`DraftConfig.int8`, CPU only): at batch 1 a forward reads every weight once, so its time follows the
weight bytes. Each matrix W [out, in] is stored as int8 with one scale per output row, s_o = max|W_o| / 127,
and multiplied by fbgemm's dynamic-quantised GEMM (the activations are quantised per call). The draft's
precision only changes which tokens it proposes and their q: the verifier accepts against the q the draft
actually used, so losslessness is untouched.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache


def int8_available() -> bool:
    """fbgemm (x86) or qnnpack (ARM) dynamic-quantised linear, present in this torch build."""
    engines = torch.backends.quantized.supported_engines
    return any(e in engines for e in ("fbgemm", "x86", "qnnpack")) and hasattr(torch.ops.quantized, "linear_dynamic")


class Int8Linear:
    """x @ W^T with W held as per-row int8 (symmetric, zero point 0) in fbgemm's packed layout."""

    def __init__(self, weight: torch.Tensor) -> None:  # weight [out, in], as nn.Linear stores it
        w = weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        zeros = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 flags quantised-tensor constructors as deprecated
            warnings.simplefilter("ignore")
            qw = torch.quantize_per_channel(w, scales, zeros, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)

    def __rmatmul__(self, x: torch.Tensor) -> torch.Tensor:  # `x @ w` reads the same for both layouts
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)  # reduce_range: no int16 overflow


class LeanDraft:
    """Read-only views of a DraftLM's weights, laid out for the lean forward."""

    @torch.no_grad()
    def __init__(self, model) -> None:  # a DraftLM (not imported: it imports this module)
        cfg = model.cfg
        self.cfg = cfg
        int8 = cfg.int8 and model.dtype == torch.float32 and model.device.type == "cpu" and int8_available()
        self.int8 = int8

        def mat(weight: torch.Tensor):  # [out, in] -> what `x @ _` multiplies by
            return Int8Linear(weight) if int8 else weight.T.contiguous()
        # x = E[id] Wp^T per call (~20 us a token); a precomputed E Wp^T table would cost every worker
        # 0.4 s and 70 MB at start-up for the 49,152 ids, almost all of which it never sees.
        self.embed = model.embed.weight.detach()
        self.proj_in = model.proj_in.weight.detach().T.contiguous()
        # Weights stored [in, out] and contiguous (a 1-row matmul against a transposed view is ~30 %
        # slower here), q/k/v fused into one matmul and gate/up into another: fewer, larger calls.
        self.layers = []
        for layer in model.core.layers:
            a, m = layer.self_attn, layer.mlp
            qkv = mat(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
            gate_up = mat(torch.cat([m.gate_proj.weight, m.up_proj.weight]))
            self.layers.append(
                (
                    layer.input_layernorm.weight.detach(),
                    qkv,
                    mat(a.o_proj.weight),
                    layer.post_attention_layernorm.weight.detach(),
                    gate_up,
                    mat(m.down_proj.weight),
                )
            )
        self.norm = model.core.norm.weight.detach()
        self.head = mat(model.head.weight)
        self.dtype = model.dtype
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
        x = (self.embed[ids] @ self.proj_in).to(self.dtype)
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
