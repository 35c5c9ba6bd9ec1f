"""Appending to a tensor along one dimension in place: what the feature draft's caches grow by.

`torch.cat((old, new))` copies all of `old` on every call: a cache of n entries grown one step at a time
costs O(n) bytes a step, O(n²) a sequence. The feature draft grows three such tensors a step - each layer's
keys and values and the predicted features, [1, 3, n, 64] and [n, 576]. `appended` instead writes `new`
into spare room after `old` when `old` is the leading part of a buffer with room, and otherwise copies it
once into a buffer twice as long: O(new) bytes a step, amortised.

A buffer is a contiguous tensor whose extent along `dim` is its capacity C; the tensor a cache holds is
its first n ≤ C rows, a view with the buffer's strides at storage offset 0, so C can be read back from
the view (C = stride[dim - 1] / stride[dim], or the storage's size over stride[0] when dim = 0) - inference
tensors record no `_base` to ask. The buffer is shared: `old`'s rows stay where they are, and rows past
`old`'s end are overwritten. So an append must come from the newest view of a buffer, as a cache's own
tensors are; a rolled-back cache (`crop`: a shorter view) writes over the rows it dropped, which is the
point. A tensor made by index_select, or any whole tensor, has no room by this reading and is copied into a
new buffer first; but the first rows of any larger contiguous tensor read as a buffer's, so only a cache's own
tensors may be handed in. One that needs grad is concatenated, as in training.
"""

from __future__ import annotations

import math

import torch

MIN_ROOM = 256  # rows a new buffer holds at least


def appended(old: torch.Tensor, new: torch.Tensor, dim: int) -> torch.Tensor:
    """`old` followed by `new` along `dim` (torch.cat's result), written in place where `old` is the leading
    part of a buffer with room for `new`."""
    if old.requires_grad or new.requires_grad or old.device != new.device:
        return torch.cat((old, new), dim)  # training keeps autograd's meaning; devices that differ, cat's error
    n, t = old.shape[dim], new.shape[dim]
    shape = list(old.shape)
    shape[dim] = n + t
    dtype = torch.result_type(old, new)
    # an inference tensor may be written only in inference mode: outside it, its rows are copied out
    writable = torch.is_inference_mode_enabled() or not old.is_inference()
    if capacity(old, dim) >= n + t and old.dtype == dtype and writable:
        grown = old.as_strided(shape, old.stride())
    else:
        size = list(new.shape)
        size[dim] = max(2 * (n + t), MIN_ROOM)
        grown = new.new_empty(size, dtype=dtype).narrow(dim, 0, n + t)
        grown.narrow(dim, 0, n).copy_(old)
    grown.narrow(dim, n, t).copy_(new)
    return grown


def capacity(view: torch.Tensor, dim: int) -> int:
    """The rows along `dim` of the buffer `view` leads, as laid out above; its own length when it leads none."""
    n = view.shape[dim]
    if view.storage_offset() != 0 or view.dim() == 0:
        return n
    inner = math.prod(view.shape[dim + 1:])
    rows = view.untyped_storage().nbytes() // view.element_size() // max(inner, 1) if dim == 0 else \
        view.stride(dim - 1) // max(view.stride(dim), 1)
    layout = list(view.shape)
    layout[dim] = rows
    if rows < n or list(view.stride()) != _contiguous_strides(layout):
        return n
    if (math.prod(layout) * view.element_size()) > view.untyped_storage().nbytes():
        return n
    return rows


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]
