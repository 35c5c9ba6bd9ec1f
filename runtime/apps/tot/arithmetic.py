"""Checking a step's arithmetic: every "a op b = c" a thought writes, worked out exactly.

A 135M model writes well-formed steps with wrong sums ("48 + 36 = 72"); its own evaluator cannot tell, so
the gsm8k search ranks a step whose calculations hold above one with a wrong one, before the model's score.
"""

from __future__ import annotations

import re
from decimal import Decimal

_NUM = r"\$?\d+(?:,\d{3})*(?:\.\d+)?"
_OP = r"[-+*/×÷x]"
# from a number that starts an expression (not inside a number, not after an operator), looking ahead, so that
# "12 - 4 = 8 + 5 = 13" is two calculations, the second from 8, and "2 + 3 * 4 = 14" one
_CALCULATION = re.compile(rf"(?<![\d.,$])(?<![-+*/×÷])(?<![-+*/×÷] )(?=({_NUM}(?:\s*{_OP}\s*{_NUM})+)\s*=\s*({_NUM}))")


def calculations(text: str) -> list[tuple[str, str]]:
    """Each "expression = result" in `text`, as written: "4 * 5 = 20 bags" -> [("4 * 5", "20")]."""
    return [(m.group(1), m.group(2)) for m in _CALCULATION.finditer(text)]


def _number(text: str) -> Decimal:
    return Decimal(text.replace("$", "").replace(",", ""))


def _value(expression: str) -> Decimal:
    """Numbers and + - * / with the usual precedence, exactly: products first, then sums, left to right."""
    tokens = re.findall(rf"{_NUM}|{_OP}", expression)
    terms, signs = [_number(tokens[0])], []
    for op, number in zip(tokens[1::2], map(_number, tokens[2::2])):
        if op in "+-":
            terms.append(number)
            signs.append(op)
        elif op == "/" or op == "÷":
            terms[-1] /= number
        else:
            terms[-1] *= number
    return terms[0] + sum(t if s == "+" else -t for s, t in zip(signs, terms[1:]))


def holds(expression: str, result: str) -> bool:
    """Whether `expression` equals `result`, to a cent (10 / 3 = 3.33 holds)."""
    try:
        return abs(_value(expression) - _number(result)) < Decimal("0.01")
    except ArithmeticError:  # a division by zero
        return False


def verdict(text: str) -> bool | None:
    """True when `text` has a calculation and every one holds, False when one does not, None when it has none."""
    found = calculations(text)
    if not found:
        return None
    return all(holds(expression, result) for expression, result in found)
