"""The measured cost model: a least-squares fit of a target forward's time that drafting decisions trust."""

from __future__ import annotations

import numpy as np
import pytest

from specsched.runtime.core.costs import DECODE_TOKENS, CostCurve, CostFit


def test_the_fit_recovers_a_linear_cost_from_noisy_forwards():
    rng = np.random.default_rng(0)
    fit = CostFit()
    for _ in range(400):
        tokens, rows = int(rng.integers(1, 12)), int(rng.integers(1, 4))
        fit.add(tokens * rows, rows, 0.010 + 0.001 * tokens * rows + 0.002 * (rows - 1) + rng.normal(0, 2e-4))
    curve = fit.curve()
    assert curve.a == pytest.approx(0.010, abs=3e-4)
    assert curve.b == pytest.approx(0.001, abs=5e-5)
    assert curve.c == pytest.approx(0.002, abs=3e-4)
    assert curve.time(5, 2) == pytest.approx(0.010 + 0.005 + 0.002, abs=5e-4)


def test_forwards_of_one_size_give_their_mean_and_no_slope():
    fit = CostFit()
    for s in (0.020, 0.022, 0.021):
        fit.add(5, 1, s)
    curve = fit.curve()
    assert curve.b == pytest.approx(0.0, abs=1e-6) and curve.c == 0.0
    assert curve.time(5) == pytest.approx(0.021, rel=1e-3)


def test_prefills_are_not_fitted_and_no_forward_gives_no_curve():
    fit = CostFit()
    fit.add(DECODE_TOKENS + 1, 1, 5.0)
    assert fit.curve() is None
    fit.add(1, 1, 0.01)
    assert fit.curve().a == pytest.approx(0.01, rel=1e-3)


def test_the_fit_follows_a_machine_that_slows_down():
    fit = CostFit(half_life=16)
    for _ in range(200):
        fit.add(1, 1, 0.010)
    for _ in range(200):
        fit.add(1, 1, 0.030)
    assert fit.curve().time(1) == pytest.approx(0.030, rel=0.01)


def test_a_slope_is_never_negative():
    fit = CostFit()
    for tokens in range(1, 10):
        fit.add(tokens, 1, 0.02 - 0.001 * tokens)  # a machine that got faster as drafts grew
    curve = fit.curve()
    assert curve.b == 0.0 and curve.a > 0


def test_the_curve_survives_the_wire_form():
    curve = CostCurve(0.01, 0.002, 0.003, 7)
    assert CostCurve.from_list(curve.to_list()) == curve
    assert CostCurve.from_list(None) is None and CostCurve.from_list([1.0]) is None
