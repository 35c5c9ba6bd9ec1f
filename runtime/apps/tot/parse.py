"""Reading what a small model wrote: evaluator scores and GSM8K final answers.

A 135M chat model rarely answers in exactly the format asked for, so each reader looks for the most
explicit form first and falls back to weaker ones. None of them raises: a reader that finds nothing
says so (`Score.ok` False, or None) and the caller decides what that costs.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .task import Score

WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
_DIGITS = r"(?<![\w.])-?\d+(?:\.\d+)?"
_WORD = r"\b(?:" + "|".join(WORDS) + r")\b"
_NUM = rf"(?:{_DIGITS}|{_WORD})"
# "Thus the coherency score is 6", "score: 7", "The number is: 8", "rating of 9", "evaluation = 5"
_PHRASE = re.compile(rf"\b(?:score|number|rating|value|evaluation)\s*(?:is|of|=|:)?\s*:?\s*({_NUM})", re.I)
_OUT_OF = re.compile(rf"({_NUM})\s*(?:/|out\s+of)\s*(\d+)", re.I)

GOOD = 10.0  # a "good" verdict: the top of the 1-10 scale the other evaluators use
BAD = 1.0  # a "bad" verdict: the bottom, where an unparseable verdict also lands (with ok False)
_VERDICT = re.compile(
    r"(?P<neg>\bnot\s+(?:a\s+|an\s+)?|n't\s+(?:a\s+|an\s+)?)?"
    r"\b(?P<word>good|valid|legal|correct|bad|invalid|illegal|incorrect|wrong)\b",
    re.I,
)
_POSITIVE = {"good", "valid", "legal", "correct"}

# a GSM8K number: "$1,234.50", "-7", "18", ".5"; commas only in proper thousands groups, so "3,4" is two numbers
_ANSWER_NUM = re.compile(r"(?<![\w.])(-)?\$?\s?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)")
_ANSWER_IS = re.compile(r"answer\s*(?:is|:|=)", re.I)


def _value(token: str) -> float:
    word = WORDS.get(token.lower())
    return float(word) if word is not None else float(token)


def parse_number(text: str, lo: float = 1, hi: float = 10) -> Score:
    """The score in an evaluator's output, on the scale [lo, hi].

    Most explicit first: the last "score/number/rating is N" phrase (the paper asks the model to
    *conclude* with it, so analysis before it may mention other numbers), then "N/hi" or "N out of hi",
    then the first number written in digits, then the first number word ("eight"). Number words only
    count when no digit is present, because "one" is also a pronoun ("a good one"). A number outside
    [lo, hi], or none at all, gives Score(lo, ok=False): a nonsense score must not outrank a real one.
    """
    found: str | None = None
    phrases = _PHRASE.findall(text)
    if phrases:
        found = phrases[-1]
    if found is None:
        for numerator, denominator in _OUT_OF.findall(text):
            if float(denominator) == hi:
                found = numerator
                break
    if found is None:
        digits = re.search(_DIGITS, text)
        words = re.search(_WORD, text, re.I)
        found = digits.group() if digits else words.group() if words else None
    if found is None:
        return Score(float(lo), ok=False)
    value = _value(found)
    if not lo <= value <= hi:
        return Score(float(lo), ok=False)
    return Score(value, ok=True)


def parse_good_bad(text: str) -> Score:
    """A "good"/"bad" verdict -> Score(10) / Score(1), so it sorts on the same scale as the 1-10 tasks.

    The first verdict word decides ("Good. It is not bad" is good); "valid/legal/correct" count as good
    and "invalid/illegal/incorrect/wrong" as bad, since a small model often reaches for them. A "not"
    right before the word flips it: "not good" and "isn't a good one" are bad, "not bad" is good.
    Nothing recognisable gives Score(1, ok=False): the evaluator did not endorse the action.
    """
    match = _VERDICT.search(text)
    if match is None:
        return Score(BAD, ok=False)
    good = match.group("word").lower() in _POSITIVE
    if match.group("neg"):
        good = not good
    return Score(GOOD if good else BAD, ok=True)


def normalise_number(text: str) -> str | None:
    """A number as GSM8K writes it -> a canonical string: "$1,234.50" -> "1234.5", "18.0" -> "18"."""
    cleaned = text.strip().replace(",", "").replace("$", "").replace(" ", "")
    try:
        number = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not number.is_finite():
        return None
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _numbers(text: str) -> list[str]:
    return [sign + digits for sign, digits in _ANSWER_NUM.findall(text)]


def extract_answer_number(text: str) -> str | None:
    """The final numeric answer in a GSM8K solution, normalised; None when there is no number.

    GSM8K's own marker "#### N" wins, then the first number after the last "answer is" / "answer:",
    then the last number in the text (a worked solution ends with its result).
    """
    marker = text.rfind("####")
    if marker >= 0:
        after = _numbers(text[marker + 4 :])
        if after:
            return normalise_number(after[0])
    stated = list(_ANSWER_IS.finditer(text))
    if stated:
        after = _numbers(text[stated[-1].end() :])
        if after:
            return normalise_number(after[0])
    numbers = _numbers(text)
    return normalise_number(numbers[-1]) if numbers else None
