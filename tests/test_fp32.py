"""The fp32 comparison rules other tests lean on (tests/fp32.py) accept rounding and nothing more."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fp32 import U, assert_close, assert_greedy_equal, tolerance

SHAPE = dict(layers=2, width=128)


def test_the_bound_is_the_stated_formula():
    # 2 orders x (2 layers x 8 + 2) reductions x 128 x u, on logits of scale 4 (and never below scale 1)
    assert tolerance([0.5, -4.0], **SHAPE) == pytest.approx(2 * 18 * 128 * U * 4.0)
    assert tolerance([0.01], **SHAPE) == pytest.approx(2 * 18 * 128 * U)


def test_rounding_passes_and_a_real_difference_fails():
    logits = np.linspace(-8, 8, 96)
    assert_close(logits + 2e-5, logits, **SHAPE)  # the size of the AVX-512 vs AVX2 differences seen
    with pytest.raises(AssertionError):
        assert_close(logits + 0.01, logits, **SHAPE)  # far below what a stale cache row or wrong position does


def _after(table):
    return lambda i, prefix: table[len(prefix)]


def test_greedy_outputs_may_part_only_at_a_tie():
    tie = np.array([0.0, 3.0, 3.0 - 1e-6, -1.0])  # tokens 1 and 2 tie within rounding
    clear = np.array([0.0, 3.0, 2.5, -1.0])  # token 1 is the argmax by 0.5
    assert_greedy_equal([[1, 1, 2]], [[1, 1, 2]], _after({}), **SHAPE)
    assert_greedy_equal([[1, 2, 0]], [[1, 1, 3]], _after({1: tie}), **SHAPE)
    with pytest.raises(AssertionError, match="differs at step 1"):
        assert_greedy_equal([[1, 2, 0]], [[1, 1, 3]], _after({1: clear}), **SHAPE)
    with pytest.raises(AssertionError, match="prefix"):
        assert_greedy_equal([[1, 1]], [[1, 1, 3]], _after({}), **SHAPE)
    with pytest.raises(AssertionError):
        assert_greedy_equal([[1]], [[1], [2]], _after({}), **SHAPE)
