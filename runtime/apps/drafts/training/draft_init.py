"""Initialise a narrow draft by compressing chosen target layers into a low-dimensional residual stream.

Let P (576 x d) hold the top-d principal directions of the target's residual stream, so h ~ P z with
z = P^T h. RMSNorm then gives h/rms(h) ~ P z/rms(z) * sqrt(576/d) (same norm, fewer dimensions), and a
target linear map W acting on g * h/rms(h) becomes W diag(g) P sqrt(576/d) acting on z/rms(z): the draft
keeps unit norm weights and folds g and the scale into the matrices. Writes into the residual (o_proj,
down_proj) become P^T W. The MLP keeps the `intermediate` neurons with the largest gate/up x down norms.
Training then repairs what the projection loses; the issue measured target-layer initialisation as the
single largest gain (alpha 0.355 from scratch vs 0.433 initialised). Skipping layers leaves the draft's
final residual unlike the target's, so the compressed head is over-confident: at 360 wide, the initial KD
loss on teacher data was 16.7 with the head as derived and 6.9 with it scaled by 0.3 (layers 0, 1), vs
66 for layers (0, 29) and ln 4096 = 8.3 for a uniform guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ....models.draft_model import DraftConfig, DraftLM


def residual_basis(hidden: Sequence[torch.Tensor], d: int) -> torch.Tensor:
    """Top-d right singular vectors of RMS-normalised residual states pooled over layers: [576, d]."""
    rows = [h.reshape(-1, h.shape[-1]).float() for h in hidden]
    rows = [r / r.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-6) for r in rows]
    _, _, vh = torch.linalg.svd(torch.cat(rows), full_matrices=False)
    return vh[:d].T.contiguous()


@torch.no_grad()
def compress_target(
    target,
    cfg: DraftConfig,
    layers: Sequence[int],
    vocab_ids: torch.Tensor,
    basis: torch.Tensor,
    head_scale: float = 0.3,
) -> DraftLM:
    """Build a DraftLM whose layer i is target layer `layers[i]` seen through `basis`."""
    if len(layers) != cfg.layers:
        raise ValueError(f"need {cfg.layers} source layers, got {layers}")
    emb = target.model.embed_tokens.weight.detach().float()
    draft = DraftLM(cfg, emb)
    draft.vocab_ids = vocab_ids.long()
    p = basis.float()
    scale = math.sqrt(cfg.target_hidden / cfg.hidden)
    draft.proj_in.weight.copy_(p.T)
    for dst, src_idx in zip(draft.core.layers, layers):
        src = target.model.layers[src_idx]
        g1 = src.input_layernorm.weight.float()
        g2 = src.post_attention_layernorm.weight.float()
        for name in ("q_proj", "k_proj", "v_proj"):
            w = getattr(src.self_attn, name).weight.float()
            getattr(dst.self_attn, name).weight.copy_((w * g1) @ p * scale)
        dst.self_attn.o_proj.weight.copy_(p.T @ src.self_attn.o_proj.weight.float())
        gate = (src.mlp.gate_proj.weight.float() * g2) @ p * scale
        up = (src.mlp.up_proj.weight.float() * g2) @ p * scale
        down = p.T @ src.mlp.down_proj.weight.float()
        keep = (gate.norm(dim=1) * up.norm(dim=1) * down.norm(dim=0)).topk(cfg.intermediate).indices.sort().values
        dst.mlp.gate_proj.weight.copy_(gate[keep])
        dst.mlp.up_proj.weight.copy_(up[keep])
        dst.mlp.down_proj.weight.copy_(down[:, keep])
        dst.input_layernorm.weight.fill_(1.0)
        dst.post_attention_layernorm.weight.fill_(1.0)
    g = target.model.norm.weight.float()
    draft.core.norm.weight.fill_(1.0)
    unembed = target.lm_head.weight.detach().float()  # tied to `emb` in SmolLM2
    draft.head.weight.copy_((unembed[vocab_ids] * g) @ p * scale * head_scale)
    return draft
