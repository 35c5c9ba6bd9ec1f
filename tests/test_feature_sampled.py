"""benchmarks/feature_sampled.py's error bars: prompts are the independent units of a sampled α, so its
standard error comes from the spread of the prompts' own α, and a paired difference from the spread of the
prompts' differences."""

from __future__ import annotations

import pytest

from benchmarks.feature_sampled import paired, summary
from specsched.runtime.apps.drafts.evaluation.feature_eval import Tally


def _tallies(*pairs: tuple[int, int]) -> list[Tally]:
    return [Tally(drafted=d, accepted=a) for d, a in pairs]


def test_the_error_of_alpha_is_the_spread_of_its_prompts():
    # α = 6/20 = 0.3; the prompts' a - α d are +2 and -2: SE = sqrt(8) / 20
    row = summary(_tallies((10, 5), (10, 1)))
    assert row["alpha"] == 0.3
    assert row["alpha_se"] == pytest.approx(0.1414, abs=1e-4)
    # every prompt at the same α: no spread, no error, however few tokens
    assert summary(_tallies((10, 3), (20, 6)))["alpha_se"] == 0.0


def test_a_paired_difference_cancels_what_the_prompts_share():
    first = _tallies((10, 5), (10, 1))
    assert paired(first, first) == {"alpha_minus_first": 0.0, "se": 0.0}
    # α 0.3 -> 0.5; the prompts' excesses (+2, -2) -> (+3, -3), over 20 drafted tokens: terms of ±0.05
    moved = paired(first, _tallies((10, 8), (10, 2)))
    assert moved == {"alpha_minus_first": 0.2, "se": pytest.approx(0.0707, abs=1e-4)}
