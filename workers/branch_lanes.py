"""Self-Draft's branch lanes: N windows of at most L tokens that ride in the target's own forward.

Each lane is a chain hung after the committed context (parent -1, then each token under the one
before), so it attends to the context and to its own earlier tokens, never to another lane or to a
candidate: the block-diagonal causal mask of the paper's Fig. 3b is the tree mask the verifier already
builds. The target's argmax after lane token j is the prediction D[j]. Per forward (Algorithm 1):

* every sub-sequence w[j-3..j] with its prediction D[j] is a 5-gram: key w[j-3], value
  (w[j-2], w[j-1], w[j], D[j]) for the context cache (j >= G - 1, G = 4);
* the lane grows by its last prediction D[-1] only (the paper: updating with every D would break the
  lane's coherence) and drops its first token once longer than L.

Initialisation: lane i copies the L - 1 prompt tokens that end at the (i + 1)-th of N evenly spaced
points inside the prompt (never at its end: that lane would only repeat what the target decodes anyway).
The paper pads random tokens; its code copies prompt tokens, and so do we:
copied text makes the target predict text of this prompt's kind from the first forward, where random
tokens give n-grams of nothing until a lane has decoded L tokens of its own.
"""

from __future__ import annotations

from .branch_cache import GRAM


class Lanes:
    def __init__(self, prompt: list[int], n: int, length: int) -> None:
        if not prompt:
            raise ValueError("branch lanes start from the prompt, which is empty")
        self.length = length
        size = len(prompt)
        ends = [max(1, size - ((i + 1) * size) // (n + 1)) for i in range(n)]  # distinct from n + 1 tokens on
        self.windows = [list(prompt[max(0, e - (length - 1)):e]) for e in ends]

    @classmethod
    def from_windows(cls, windows: list[list[int]], length: int) -> Lanes:
        lanes = cls.__new__(cls)
        lanes.length, lanes.windows = length, [list(w) for w in windows]
        return lanes

    @property
    def size(self) -> int:
        """Tokens the lanes add to a forward."""
        return sum(len(w) for w in self.windows)

    def nodes(self, offset: int) -> tuple[list[int], list[int]]:
        """The lanes as draft nodes placed from index `offset` on: (tokens, parents)."""
        return self.chains(self.windows, offset)

    @staticmethod
    def chains(windows: list[list[int]], offset: int) -> tuple[list[int], list[int]]:
        """Each window a chain whose first token hangs on the committed context (-1), from index `offset` on."""
        tokens: list[int] = []
        parents: list[int] = []
        for w in windows:
            start = offset + len(tokens)
            tokens += w
            parents += [-1] + [start + j for j in range(len(w) - 1)]
        return tokens, parents

    def update(self, predictions: list[int]) -> list[tuple[int, tuple[int, ...]]]:
        """Take the target's prediction after every lane token (in node order); return the context
        cache's new (key, 4-gram) entries and move each lane on by its last prediction."""
        if len(predictions) != self.size:
            raise ValueError(f"{len(predictions)} lane predictions for {self.size} lane tokens")
        entries: list[tuple[int, tuple[int, ...]]] = []
        at = 0
        for w in self.windows:
            d = predictions[at:at + len(w)]
            at += len(w)
            for j in range(GRAM - 1, len(w)):
                entries.append((w[j - GRAM + 1], (*w[j - GRAM + 2:j + 1], d[j])))
            w.append(d[-1])
            del w[:-self.length]
        return entries
