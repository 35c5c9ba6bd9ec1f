"""Appending in place (runtime/models/growing_rows.py): torch.cat's result through any mix of appends, rollbacks
(shorter views) and reorders, with the rows written once; a whole tensor handed in is never written into;
training keeps autograd's concatenation."""

from __future__ import annotations

import pytest
import torch

from specsched.runtime.models.growing_rows import MIN_ROOM, appended, capacity


@pytest.mark.parametrize("inference", [True, False])
@pytest.mark.parametrize("dim, shape", [(2, (1, 3, 0, 4)), (0, (0, 6))])
def test_appends_rollbacks_and_reorders_give_torch_cats_result(inference, dim, shape):
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode(inference):
        grown, plain = torch.zeros(shape), torch.zeros(shape)
        in_place = 0
        for step in range(400):
            n, roll = grown.shape[dim], torch.rand((), generator=gen).item()
            if roll < 0.15 and n:  # a rollback: a shorter view (crop)
                keep = int(torch.randint(0, n, (), generator=gen))
                grown, plain = grown.narrow(dim, 0, keep), plain.narrow(dim, 0, keep)
            elif roll < 0.2 and n:  # a reorder: index_select (a tree's accepted path)
                idx = torch.randperm(n, generator=gen)[: max(n // 2, 1)]
                grown, plain = grown.index_select(dim, idx), plain.index_select(dim, idx)
            else:
                size = list(shape)
                size[dim] = int(torch.randint(1, 6, (), generator=gen))
                new = torch.randn(size, generator=gen)
                before = grown.data_ptr()
                grown, plain = appended(grown, new, dim), torch.cat((plain, new), dim)
                in_place += grown.data_ptr() == before and n > 0
            assert torch.equal(grown, plain), step
        assert in_place > 200  # most appends wrote only their own rows


def test_a_new_buffer_has_room_to_double_and_a_whole_tensor_is_never_written_into():
    whole = torch.arange(12.0).view(3, 4)
    kept = whole.clone()
    grown = appended(whole, torch.ones(1, 4), 0)
    assert torch.equal(whole, kept) and capacity(grown, 0) == MIN_ROOM and capacity(whole, 0) == 3
    assert capacity(torch.zeros(2, 10)[:, :4], 0) == 2  # columns of a wider tensor: not a buffer's rows
    big = appended(torch.zeros(MIN_ROOM, 2), torch.zeros(1, 2), 0)
    assert capacity(big, 0) == 2 * (MIN_ROOM + 1)


def test_an_inference_cache_grown_outside_inference_mode_is_copied_and_dtypes_promote_as_cat_does():
    with torch.inference_mode():
        cache = appended(torch.zeros(0, 3), torch.ones(2, 3), 0)
    grown = appended(cache, torch.full((1, 3), 2.0), 0)  # torch refuses in-place writes to it here
    assert grown.tolist() == [[1.0] * 3, [1.0] * 3, [2.0] * 3] and cache.shape == (2, 3)
    mixed = appended(torch.zeros(2, 3, dtype=torch.bfloat16), torch.ones(1, 3), 0)
    assert mixed.dtype == torch.cat((torch.zeros(2, 3, dtype=torch.bfloat16), torch.ones(1, 3))).dtype


def test_what_needs_grad_is_concatenated_and_gradients_flow():
    old, new = torch.zeros(2, 3, requires_grad=True), torch.ones(1, 3, requires_grad=True)
    out = appended(old, new, 0)
    out.sum().backward()
    assert out.shape == (3, 3) and torch.equal(new.grad, torch.ones(1, 3)) and torch.equal(old.grad, torch.ones(2, 3))
