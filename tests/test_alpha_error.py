"""The error bars of a sampled α (feature_eval.alpha_error, paired_alpha): prompts are the independent units,
so the standard error comes from the spread of the prompts' own α, and a paired difference from the spread of
the prompts' differences."""

from __future__ import annotations

import math

import pytest

from specsched.runtime.apps.drafts.evaluation.feature_eval import Tally, alpha_error, paired_alpha


def _tallies(*pairs: tuple[int, int]) -> list[Tally]:
    return [Tally(drafted=d, accepted=a) for d, a in pairs]


def test_the_error_of_alpha_is_the_spread_of_its_prompts():
    # α = 6/20 = 0.3; the prompts' a - α d are +2 and -2: SE = sqrt(8) / 20
    assert alpha_error(_tallies((10, 5), (10, 1))) == pytest.approx(math.sqrt(8) / 20)
    # every prompt at the same α: no spread, no error, however few tokens
    assert alpha_error(_tallies((10, 3), (20, 6))) == 0.0


def test_a_paired_difference_cancels_what_the_prompts_share():
    first = _tallies((10, 5), (10, 1))
    assert paired_alpha(first, first) == (0.0, 0.0)
    # α 0.3 -> 0.5; the prompts' excesses (+2, -2) -> (+3, -3), over 20 drafted tokens: terms of ±0.05
    other = _tallies((10, 8), (10, 2))
    diff, se = paired_alpha(first, other)
    assert (diff, se) == (pytest.approx(0.2), pytest.approx(math.sqrt(2) * 0.05))
    # both drafts find prompt 1 easy and prompt 2 hard: pairing removes that, the unpaired error keeps it
    assert se < math.hypot(alpha_error(first), alpha_error(other)) / 3
