"""A KV cache that appends in place: transformers' DynamicCache without the copy on every token.

DynamicCache grows each layer by `torch.cat([keys, new])`, copying the whole cache on every forward:
O(n) bytes per token, O(n^2) per sequence. For a small draft at batch 1 on CPU those copies are a fifth
of its forward (~40 us per layer per tensor at a few hundred tokens). GrowingLayer keeps the keys and
values in a buffer with spare room (capacity doubles when full) and exposes the filled prefix as a view,
so appending T tokens writes T rows. Everything else keeps DynamicLayer's meaning:
- `crop` slices the view: the rows past it are stale and the next `update` overwrites them;
- code that replaces `keys`/`values` with new tensors (rollback by `index_select`, beam reordering) is
  detected (the view no longer starts the buffer) and the next `update` copies them into a fresh buffer.

How a model is handed its cache is said here too, once: transformers calls it `cache` since 5.24, in a
forward's arguments and in its output; `past_key_values`, the name before, warns there and goes in 5.40,
and the releases before 5.24 know only that one.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

MIN_CAPACITY = 256
# the field a model output holds its cache in, for the installed transformers
CACHE_FIELD = next(f.name for f in dataclasses.fields(CausalLMOutputWithPast) if f.name in ("cache", "past_key_values"))


def cache_keyword(module: torch.nn.Module) -> str:
    """The keyword `module`'s forward takes its cache by."""
    return _cache_keyword(type(module))


@functools.cache
def _cache_keyword(cls: type) -> str:  # read once per class: a signature costs tens of microseconds a call
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def cache_out(output) -> DynamicCache | None:
    """The cache a forward returned."""
    return getattr(output, CACHE_FIELD)


class GrowingLayer(DynamicLayer):
    _k: torch.Tensor | None = None  # the buffers; `keys`/`values` are views of their first rows
    _v: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = n + key_states.shape[-2]
        if not self._owns(key_states, end):
            self._grow(key_states, value_states, n, end)
        self._k[..., n:end, :] = key_states
        self._v[..., n:end, :] = value_states
        self.keys, self.values = self._k[..., :end, :], self._v[..., :end, :]
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        """Rows the buffer holds before it must grow (0 before the first update)."""
        return 0 if self._k is None else self._k.shape[-2]

    def in_place(self) -> bool:
        """True while `keys` is the prefix view of the buffer: an append is a write, not a copy."""
        return self._k is not None and self.keys.data_ptr() == self._k.data_ptr()

    def _owns(self, new: torch.Tensor, end: int) -> bool:
        """True when `keys` is still the prefix view of our buffer and the buffer has room up to `end`."""
        k = self._k
        if k is None or end > k.shape[-2] or k.shape[:-2] != new.shape[:-2] or k.dtype != new.dtype:
            return False
        if k.device != new.device or (k.is_inference() and not torch.is_inference_mode_enabled()):
            return False  # an inference tensor cannot be written outside inference mode: copy it out
        return self.keys.dim() != 4 or (
            self.keys.data_ptr() == k.data_ptr() and self.values.data_ptr() == self._v.data_ptr()
            and self.keys.stride() == k.stride()
        )

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, n: int, end: int) -> None:
        cap = max(MIN_CAPACITY, 2 * end)
        k = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
        v = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
        if n:
            k[..., :n, :], v[..., :n, :] = self.keys, self.values
        self._k, self._v = k, v


class GrowingCache(DynamicCache):
    """A DynamicCache whose layers are GrowingLayers (built lazily, one per model layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_class_to_replicate = GrowingLayer
