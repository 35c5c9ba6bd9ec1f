"""The draft's inference forward, written out: the same Llama math as `LlamaModel`, a fraction of the calls.

A 2-layer, 360-wide draft does ~5 M multiply-adds per token - tens of microseconds of arithmetic on
one core - so its cost is the framework's per-call overhead (mask builders, rotary module, output
classes): every torch call costs a few microseconds whatever its size. The issue's bar is a draft forward
<= 1/30 of a target forward; this path is what meets it, by making fewer calls: fused q/k/v and gate/up
matrices, q and k rotated together from precomputed tables, RMSNorm's sqrt(n) folded into the next
matrix, int8 matrices called directly.
Training keeps the transformers modules (autograd, no cache); the lean path works on copies of the same
weights, and a test checks that the two agree in fp32.

Per layer, with x the residual stream, RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w:
    h = RMSNorm(x);  q, k, v = h Wq, h Wk, h Wv;  q, k = rope(q, pos), rope(k, pos)
    x = x + softmax(q K^T / sqrt(d) + mask) V Wo          (K, V: cache + new; GQA: heads share kv heads)
    h = RMSNorm(x);  x = x + (silu(h Wg) * h Wu) Wd
rope(x, p) = x cos(p f) + rotate_half(x) sin(p f), f_i = theta^(-2i/d), rotate_half([a, b]) = [-b, a].

int8 (`DraftConfig.int8`, CPU only): at batch 1 a forward reads every weight once, so its time follows the
weight bytes. Each matrix W [out, in] is stored as int8 with one scale per output row, s_o = max|W_o| / 127,
and multiplied by fbgemm's dynamic-quantised GEMM. The draft's precision only changes which tokens it
proposes and their q: the verifier accepts against the q the draft actually used, so losslessness is
untouched.

Activations are quantised per token, not per call. fbgemm picks one (scale, zero point) per call from the
call's min and max, so a token's q used to depend on which tokens shared its call: a draft restarted after
a crash re-reads its context in one call where the first run read it a few tokens at a time, got another q,
and a sampled run wrote other text (issue 43). Here each row x is divided by r = max|x| before the call and
a sentinel row [1, -1, 0, ...] is appended, so every call's range is exactly [-1, 1] and its quantisation
parameters are the same constants; the int8 products are summed in int32, exactly, in any order; the row's
result is multiplied by r again. So a token's output does not depend on its call's other rows, bit for bit
(tests/test_lean_forward.py), at one extra row per call.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache

MAX_ROWS = 8192  # cached projected embedding rows per draft: <= 12 MB at width 360


def int8_available() -> bool:
    """fbgemm (x86) or qnnpack (ARM) dynamic-quantised linear, present in this torch build."""
    engines = torch.backends.quantized.supported_engines
    return any(e in engines for e in ("fbgemm", "x86", "qnnpack")) and hasattr(torch.ops.quantized, "linear_dynamic")


class Int8Linear:
    """x W^T with W held as per-row int8 (symmetric, zero point 0) in fbgemm's packed layout."""

    def __init__(self, weight: torch.Tensor) -> None:  # weight [out, in], as nn.Linear stores it
        w = weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        zeros = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 flags quantised-tensor constructors as deprecated
            warnings.simplefilter("ignore")
            qw = torch.quantize_per_channel(w, scales, zeros, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(qw, None)
        self.sentinel = torch.zeros(1, w.shape[1])
        self.sentinel[0, :2] = torch.tensor([1.0, -1.0])  # pins every call's range to [-1, 1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        r = rows.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
        # reduce_range (7-bit activations): no int16 overflow in fbgemm's kernels
        y = torch.ops.quantized.linear_dynamic(torch.cat((rows / r, self.sentinel)), self.packed, True)
        return (y[:-1] * r).reshape(*shape[:-1], -1)


class Dense:
    """x W^T with W stored [in, out] and contiguous (a 1-row matmul against a transposed view is ~30 % slower)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.wt = weight.detach().T.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.wt


class LeanDraft:
    """Copies of a DraftLM's weights laid out for the lean forward (scaled, fused, int8-packed); the model
    drops this object in `train()`, so it is rebuilt from the current weights after training."""

    @torch.no_grad()
    def __init__(self, model) -> None:  # a DraftLM (not imported: it imports this module)
        cfg = self.cfg = model.cfg
        self.int8 = cfg.int8 and model.dtype == torch.float32 and model.device.type == "cpu" and int8_available()
        self.dtype = model.dtype
        # RMSNorm's sqrt(n) is folded into the matrix after it: RMSNorm(x) W = x rsqrt(sum(x^2) + n eps) w (sqrt(n) W).
        # A uniform scale leaves each int8 row's quantisation unchanged. Folding w would scale each input
        # column differently and change every row's quantisation (measured: -0.5 % target agreement), so w
        # stays a multiply.
        root_n = cfg.hidden**0.5

        def mat(weight: torch.Tensor, scale: float = 1.0) -> Int8Linear | Dense:
            return Int8Linear(weight * scale) if self.int8 else Dense(weight * scale)
        # x = E[id] Wp^T. A precomputed E Wp^T table would cost every worker 0.4 s and 70 MB at start-up for
        # the 49,152 ids, almost all of which it never sees; so rows are computed on first use and kept
        # (1.4 kB each, at most MAX_ROWS of them) for 1-token calls, the decode loop. Not int8: the target's
        # embeddings have outlier dimensions that per-tensor activation quantisation destroys.
        self.embed = model.embed.weight.detach()
        self.proj_in = Dense(model.proj_in.weight)
        self.rows: dict[int, torch.Tensor] = {}
        # q/k/v fused into one matmul and gate/up into another: fewer, larger calls.
        self.layers = []
        for layer in model.core.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(
                (
                    layer.input_layernorm.weight.detach(),
                    mat(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), root_n),
                    mat(a.o_proj.weight),
                    layer.post_attention_layernorm.weight.detach(),
                    mat(torch.cat([m.gate_proj.weight, m.up_proj.weight]), root_n),
                    mat(m.down_proj.weight),
                )
            )
        self.norm = model.core.norm.weight.detach()
        self.head = mat(model.head.weight, root_n)
        self.n_eps = cfg.hidden * cfg.rms_norm_eps
        self.qk = (cfg.heads + cfg.kv_heads) * cfg.head_dim  # q and k: the first columns of the fused matmul
        d = cfg.head_dim
        dev = model.device  # tables live beside the weights (CPU or a GPU)
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=dev) / d))
        self.cos = self.sin = torch.empty(0, d, device=dev)

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # RMSNorm(x) / sqrt(n)
        if x.dtype == torch.float32:  # the default: no casts on the hot path
            return x * (x * x).sum(-1, keepdim=True).add_(self.n_eps).rsqrt_() * w
        xf = x.float()  # sum(x^2) overflows fp16 once rms(x) > ~13; transformers upcasts too
        return (xf * (xf * xf).sum(-1, keepdim=True).add_(self.n_eps).rsqrt_()).to(x.dtype) * w

    def _row(self, token: int) -> torch.Tensor:
        row = self.rows.get(token)
        if row is None:
            row = self.proj_in(self.embed[token])
            if len(self.rows) < MAX_ROWS:
                self.rows[token] = row
        return row

    def _rope_tables(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos(p f) and sign * sin(p f) for positions < n (doubling), sign = -1 on the first half: then
        rope(x) = x cos + roll(x, d/2) sign sin, since roll([a, b]) = [b, a] and rotate_half = [-b, a]."""
        if n > self.cos.shape[0]:
            dev = self.inv_freq.device
            freqs = torch.arange(max(2 * n, 512), dtype=torch.float32, device=dev)[:, None] * self.inv_freq
            half = freqs.shape[1]
            sign = torch.cat([-torch.ones(half, device=dev), torch.ones(half, device=dev)])
            emb = torch.cat([freqs, freqs], dim=-1)
            self.cos, self.sin = emb.cos().to(self.dtype), (emb.sin() * sign).to(self.dtype)
        return self.cos, self.sin

    @torch.inference_mode()
    def __call__(
        self, ids: torch.Tensor, positions: torch.Tensor, cache: Cache, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits over the draft vocabulary [B, T, draft_vocab]; `cache` (a transformers Cache) grows by T.

        mask: bool [B, 1, T, past + T], True where a query may attend; None = causal after the cache.
        """
        cfg, (b, t) = self.cfg, ids.shape
        heads, d = cfg.heads, cfg.head_dim
        if b * t == 1:  # one token: a cached row and a slice of the rope tables
            x, p = self._row(int(ids)).view(1, 1, -1), int(positions)
            cos, sin = self._rope_tables(p + 1)
            cos, sin = cos[p : p + 1].view(1, 1, 1, d), sin[p : p + 1].view(1, 1, 1, d)
        else:
            x = self.proj_in(F.embedding(ids, self.embed))
            cos, sin = self._rope_tables(int(positions.max()) + 1)
            cos, sin = F.embedding(positions, cos)[:, :, None], F.embedding(positions, sin)[:, :, None]  # [B,T,1,d]
        causal = mask is None and t > 1
        for i, (w_in, w_qkv, wo, w_post, w_gu, wd) in enumerate(self.layers):
            qkv = w_qkv(self._rms(x, w_in))
            qk = qkv[..., : self.qk].view(b, t, -1, d)  # q heads then k heads, rotated together
            qk = torch.addcmul(qk * cos, qk.roll(d // 2, -1), sin)
            v = qkv[..., self.qk :].view(b, t, cfg.kv_heads, d).transpose(1, 2)
            k, v = cache.update(qk[:, :, heads:].transpose(1, 2), v, i)
            q = qk[:, :, :heads].transpose(1, 2)
            if causal and k.shape[2] > t:  # a causal block after cached entries: explicit mask
                past = k.shape[2] - t
                allowed = torch.ones(t, past + t, dtype=torch.bool, device=q.device).tril(past)
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
            else:  # GQA: query heads share kv heads without copying them
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
            x = x + wo(o.transpose(1, 2).reshape(b, t, -1))
            gate, up = w_gu(self._rms(x, w_post)).chunk(2, dim=-1)
            x = x + wd(F.silu(gate).mul_(up))
        return self.head(self._rms(x, self.norm))
