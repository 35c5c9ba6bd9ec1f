"""What-if's cost of a batched forward, fitted from a trace: a slope only where the forwards tell it apart."""

from __future__ import annotations

import random

import pytest

from specsched.runtime.apps.analysis.forward_cost import batch_extra, fit_cost
from specsched.runtime.core.costs import CostCurve
from specsched.runtime.core.events import VERIFIER, Event


def forwards(batches: list[list[int]], seconds) -> tuple[list[Event], dict]:
    """One forward per batch (each seq's round 1 on, its draft's length given), lasting seconds(rows, longest)."""
    events, lengths, t, rounds = [], {}, 0.0, {}
    for batch in batches:
        d = seconds(len(batch), max(batch))
        events.append(Event(1, "verifier", VERIFIER, "verify", t, t + d))
        for seq, length in enumerate(batch):
            rnd = rounds[seq] = rounds.get(seq, 0) + 1
            lengths[seq, rnd] = length
            events.append(Event(10 + seq, "draft", seq, "verify", t, t + d, seq))
        t += d + 0.001
    first = [Event(10 + s, "draft", s, "verify", -1.0 - s, -0.5 - s, s) for s in range(5)]  # round 0: prompts
    return first + events, lengths


def test_single_drafts_of_one_length_tell_no_slope_whatever_the_noise():
    # every forward reads 5 tokens in one row, 10 ms give or take 2: the live fit's kind of noise, not a slope
    rng = random.Random(0)
    events, lengths = forwards([[4]] * 80, lambda rows, longest: 0.010 + rng.uniform(-0.002, 0.002))
    cost = fit_cost(events, lengths)
    assert cost.b == 0 and cost.c == 0 and cost.a == pytest.approx(0.010, abs=0.001)
    assert batch_extra(cost, [4, 4, 4]) == 0  # a batch costs what one draft does


def test_batches_of_several_rows_show_what_a_row_costs():
    rng = random.Random(1)
    batches = [[4] * rng.randint(1, 5) for _ in range(80)]
    events, lengths = forwards(batches, lambda rows, longest: 0.010 + 0.002 * (rows - 1) + rng.uniform(0, 0.0005))
    cost = fit_cost(events, lengths)
    # rows of the same length: tokens = 5 rows, so the row's cost may show as b·5 or as c - either way 2 ms a row
    assert batch_extra(cost, [4, 4, 4]) == pytest.approx(0.004, rel=0.1)


def test_too_few_forwards_fit_nothing():
    events, lengths = forwards([[4], [4]], lambda rows, longest: 0.01)
    assert fit_cost(events, lengths) is None
    assert batch_extra(None, [4, 4]) == 0 and batch_extra(CostCurve(0.01, 0.001, 0.002), [3]) == 0
