"""Reading evaluator outputs and GSM8K answers the way a small chat model actually writes them."""

from __future__ import annotations

import pytest

from specsched.runtime.apps.tot.arithmetic import verdict
from specsched.runtime.apps.tot.parse import extract_answer_number, normalise_number, parse_good_bad, parse_number
from specsched.runtime.apps.tot.task import Score


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8", Score(8.0, True)),
        (" 7", Score(7.0, True)),
        ("10", Score(10.0, True)),
        ("1", Score(1.0, True)),
        ("8/10", Score(8.0, True)),
        ("I would give it 9 out of 10.", Score(9.0, True)),
        ("score: 7", Score(7.0, True)),
        ("Score: 7/10", Score(7.0, True)),
        ("The number is: 6.", Score(6.0, True)),
        ("7.5", Score(7.5, True)),
        ("eight", Score(8.0, True)),
        ("The score is Nine.", Score(9.0, True)),
        # the paper's format: analysis first (with other numbers in it), the score on the last line
        ("The passage has 4 paragraphs and paragraph 2 is weak.\nThus the coherency score is 6", Score(6.0, True)),
        ("Paragraph 3 drifts from the topic. Overall 7/10.", Score(7.0, True)),
        # the first number wins when nothing marks one as the score
        ("5. The sub-answer is right but 3 steps are missing", Score(5.0, True)),
        # digits beat number words: "one" is usually a pronoun
        ("This one is a 4", Score(4.0, True)),
        ("The number is: 15", Score(1.0, False)),
        ("0", Score(1.0, False)),
        ("-3", Score(1.0, False)),
        ("11/10", Score(1.0, False)),
        ("", Score(1.0, False)),
        ("   ", Score(1.0, False)),
        ("The sub-answer is helpful.", Score(1.0, False)),
        ("<|im_end|>", Score(1.0, False)),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


def test_parse_number_other_scale():
    assert parse_number("4", lo=0, hi=5) == Score(4.0, True)
    assert parse_number("0", lo=0, hi=5) == Score(0.0, True)
    assert parse_number("7", lo=0, hi=5) == Score(0.0, False)
    assert parse_number("3/5", lo=0, hi=5) == Score(3.0, True)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("good", Score(10.0, True)),
        (" Good.", Score(10.0, True)),
        ("GOOD", Score(10.0, True)),
        ("bad", Score(1.0, True)),
        ("Bad. The blue block is not clear.", Score(1.0, True)),
        ("not good", Score(1.0, True)),
        ("The action isn't a good one.", Score(1.0, True)),
        ("not bad", Score(10.0, True)),
        ("The action is valid", Score(10.0, True)),
        ("This action is invalid because the hand is full", Score(1.0, True)),
        ("illegal", Score(1.0, True)),
        # the first verdict decides
        ("good, not bad", Score(10.0, True)),
        ("bad. A good action would be to unstack", Score(1.0, True)),
        # "goodness" is not "good"
        ("goodness me", Score(1.0, False)),
        ("", Score(1.0, False)),
        ("unstack the red block", Score(1.0, False)),
    ],
)
def test_parse_good_bad(text, expected):
    assert parse_good_bad(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("18", "18"),
        ("The answer is 18.", "18"),
        ("The answer is: $18", "18"),
        ("She makes 9 * 2 = $18 every day.\n#### 18", "18"),
        ("#### 72", "72"),
        ("#### 1,234", "1234"),
        ("He pays $1,234.50 in total.", "1234.5"),
        ("18.0", "18"),
        ("The temperature fell to -7 degrees.", "-7"),
        ("16 - 3 - 4 = 9 eggs, so 9 * 2 = 18", "18"),
        ("16-3-4=9", "9"),
        # an explicit answer beats the numbers worked after it
        ("The answer is 14. Check: 14 * 6 = 84", "14"),
        ("answer: 0.5 of the pie", "0.5"),
        ("3,4 and 5", "5"),
        ("I don't know.", None),
        ("", None),
    ],
)
def test_extract_answer_number(text, expected):
    assert extract_answer_number(text) == expected


def test_normalised_numbers_compare_equal():
    assert normalise_number("18.0") == normalise_number("18") == "18"
    assert normalise_number("$1,000") == "1000"
    assert normalise_number("2.50") == "2.5"
    assert normalise_number("ten") is None


@pytest.mark.parametrize(
    "step, holds",
    [
        ("48 + 36 = 84 rolls in all.", True),
        ("48 + 36 = 72 rolls.", False),  # SmolLM2-135M's sums are often well formed and wrong
        ("5 x 6 = 30 pens", True),
        ("84 / 6 = 14 bags", True),
        ("6 ÷ 4 = 1.5", True),
        ("2 + 3 * 4 = 14", True),  # products first
        ("12 - 4 = 8 + 5 = 13", True),  # a chain: two calculations
        ("3 * 4 = 12 and 12 - 2 = 9", False),  # one wrong calculation fails the step
        ("10 / 3 = 3.33", True),  # to a cent
        ("5 / 0 = 1", False),
        ("$1,200 - $200 = $1,000", True),
        ("1/5 * 6 = 3 pens", False),
        ("Anna has 12 pencils.", None),  # nothing to check
        ("4 bags * 5 marbles = 20 marbles", None),  # words between the numbers: not read as a calculation
    ],
)
def test_a_steps_arithmetic_is_worked_out_exactly(step, holds):
    assert verdict(step) is holds
