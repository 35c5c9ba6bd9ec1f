"""Prompt lookup inside a drafter: when the text repeats itself, propose what followed last time.

Small chat models repeat themselves: a GSM8K answer restates the question's numbers and names, a
Blocksworld plan repeats "unstack the X block from on top of the Y block". For such stretches an n-gram
seen earlier predicts the next token better than a small draft model does. `NgramIndex` maps every
n-gram (n = 2..N) of the committed context to the token that followed its most recent occurrence;
the drafter asks it first and falls back to its model when no n-gram matches.

Why this stays lossless: a looked-up token x is proposed with q = δ_x (probability one), sent as a point
mass (runtime/core/draft_q.py: a flag, not a V-wide row). The verifier
accepts it with min(1, p(x)/q(x)) = p(x) and otherwise samples from norm(max(0, p − δ_x)), i.e. p with x
removed; so x comes out with probability p(x) and every y ≠ x with (1 − p(x)) · p(y) / (1 − p(x)) = p(y).
Greedy verification only compares argmaxes, so any proposal is exact there.
"""

from __future__ import annotations


class NgramIndex:
    """n-gram (2 <= n <= longest) of a growing token list -> the token after its latest occurrence."""

    def __init__(self, longest: int) -> None:
        self.longest = longest
        self.seen = 0  # tokens read so far
        self.recent: list[int] = []  # the last `longest` of them: all `extend` needs to form n-grams
        self.next: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: list[int]) -> None:
        for t in tokens:
            r = self.recent  # t follows the n-grams that end with r's last token
            for n in range(2, min(self.longest, len(r)) + 1):
                self.next[tuple(r[-n:])] = t
            r.append(t)
            del r[: -self.longest]
            self.seen += 1

    def lookup(self, tail: list[int]) -> int | None:
        """The token that followed the longest n-gram ending `tail`, or None when none occurred."""
        for n in range(min(self.longest, len(tail)), 1, -1):
            hit = self.next.get(tuple(tail[-n:]))
            if hit is not None:
                return hit
        return None


    def follow(self, tail: list[int], most: int) -> list[int]:
        """Up to `most` tokens, each the one `lookup` finds after the text so far (`tail`, then those found):
        what followed the latest earlier occurrence, read on while the text keeps matching."""
        found: list[int] = []
        while len(found) < most and (t := self.lookup([*tail, *found][-self.longest:])) is not None:
            found.append(t)
        return found
