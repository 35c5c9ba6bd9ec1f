"""A CPU target's forward over the few rows a verification reads (k + 1 per chain): the same math, cheaper.

A verifier's forward reads k + 1 new rows where target-only decoding reads one, so speculation pays only
as far as those rows cost little more than one. On the CPU two parts of transformers' stock forward make
them cost more than they must (benchmarks/verify_rows.py):

- **matrices.** nn.Linear calls MKL's sgemm, which at 1-3 rows streams the weights at memory speed but at
  4 rows and more takes a path ~1.7x slower per call on the 2-vCPU Intel Xeons measured. Here each matrix
  of a target also keeps a copy of its weight in oneDNN's packed layout (`_reorder_linear_weight`), and a
  call of at least PACKED_ROWS rows multiplies by it (oneDNN's inner product); fewer rows keep MKL. Same
  products, summed in another order: logits move by ~1e-5 (fp32 rounding), which can change a greedy token
  only at a near-tie (docs/lossless.md), as MKL's own paths for 1 and 5 rows already differ. The copy costs
  the weights' bytes again (+540 MB for SmolLM2-135M), and is made again if the weight changes in place
  (a tensor's version counter), so training through it cannot read a stale copy.
- **attention.** With grouped-query attention (3 key/value heads for 9 query heads) and a mask, which a
  call of several rows over a cache has, transformers repeats every cached key and value for each group
  (`repeat_kv`: a copy of the whole cache, each layer, each call) because CUDA's fast kernels take no mask
  with shared heads; the CPU kernel does (`enable_gqa`), and computes the same sums: bit-identical logits
  (tests/test_few_rows.py). Every other call goes to transformers' own function unchanged.

`SPECSCHED_CPU_ROWS=0` keeps transformers' stock forward (to time one against the other). Every target HFModel
holds on the CPU in fp32 takes this path (`for_target`, the one place of that rule); the project's own drafts
have their own forwards.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..core.device import cpu_rows

PACKED_ROWS = 4  # MKL's sgemm is the faster below this many rows, oneDNN's packed weights from here on
ATTENTION = "specsched_sdpa"  # the name the attention function below is registered under


def packs_available() -> bool:
    """oneDNN's packed linear (torch.ops.mkldnn) in this torch build, and usable on this CPU."""
    ops = torch.ops.mkldnn
    return torch.backends.mkldnn.is_available() and all(
        hasattr(ops, op) for op in ("_reorder_linear_weight", "_linear_pointwise"))


def for_target(module: torch.nn.Module) -> list[str]:
    """A target placed on the CPU in fp32 sped up, unless $SPECSCHED_CPU_ROWS=0; the changes made, by name.
    (A GPU's kernels and a half-precision or quantised target are left as transformers runs them.)"""
    weight = next(module.parameters())
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not cpu_rows():
        return []
    return speed_up(module)


def speed_up(module: torch.nn.Module) -> list[str]:
    """Give a CPU fp32 target both changes where this torch and this model allow; the changes made, by name."""
    made = []
    if packs_available():
        linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear) and m.weight.dtype == torch.float32]
        for linear in linears:
            linear.forward = types.MethodType(_forward, linear)
        made.append(f"packed matrices ({len(linears)})")
    config = getattr(module, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) == "sdpa" and _register():
        config._attn_implementation = ATTENTION
        made.append("shared key/value heads")
    return made


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear's x Wᵀ + b: by oneDNN's packed copy of W for PACKED_ROWS rows or more outside autograd."""
    if x.numel() < PACKED_ROWS * self.in_features or torch.is_grad_enabled() or x.dtype != torch.float32:
        return F.linear(x, self.weight, self.bias)
    version = self.weight._version  # bumped by every in-place change (an optimiser's step, load_state_dict)
    if getattr(self, "_packed_version", None) != version:
        self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), PACKED_ROWS + 1)
        self._packed_version = version
    return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' sdpa attention, with the key/value heads shared inside the kernel where it would repeat
    them (several query rows, a mask, groups > 1, nothing else asked); every other call is its own."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (query.shape[2] == 1 or attention_mask is None or groups == 1 or query.device.type != "cpu"
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
            or kwargs.get("output_attentions", False)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def _register() -> bool:
    """The attention function and its masks (sdpa's) registered with transformers; False where this torch has
    no shared-head SDPA (before 2.5)."""
    if "enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""):
        return False
    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return True
