"""Goodput: verify the batch that commits the most expected tokens per second of target time.

`batch` verifies every ready draft in one forward. On a CPU that is not free: a padded forward over
rows of lengths l_i reads R·max(l_i) tokens and costs, by the verifier's fitted curve
(runtime/core/costs.py, handed to the policy as ``self.cost`` before every pick),

    t(S) = a + b · |S| · max_{i∈S}(L_i + 1) + c · (|S| − 1)

(each row is the draft plus the last committed token the target has not read yet). A batch S
commits Σ_{i∈S} E_i tokens in expectation, E_i the sequence's running mean of tokens committed per
verification (``expected_tokens``; L_i/2 + 1 before its first verdict). This policy picks

    S* = argmax  Σ_{i∈S} E_i / t(S)   over the batches that contain the oldest ready draft

(the oldest always goes, so no draft waits forever). t(S) depends on S only through |S| and the
longest row, so for a longest-row bound L and a size k the best S is the oldest draft plus the k − 1
others of length ≤ L with the largest E: trying every (L, k) finds S* exactly in O(n²) (a set whose
longest row is shorter than L is also tried at its own length, where it costs no more). A long
draft with a poor record is left for a later forward instead of padding every row to its length;
a draft that costs a row and a few tokens but brings more than the batch's average joins. Until the
verifier has timed a forward (``self.cost`` is None) it behaves as `batch`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class Goodput(Policy):
    name = "goodput"

    def pick(self, ready: Sequence[ReadyDraft]) -> list[ReadyDraft]:
        ordered = sorted(ready, key=by_arrival)
        limit = self.settings.max_batch or len(ordered)
        if self.cost is None:
            return ordered[:limit]
        head, best, best_rate = ordered[0], [ordered[0]], self.rate([ordered[0]])
        for bound in sorted({d.length for d in ordered if d.length >= head.length}):
            # the others that fit under the bound, most expected tokens first (ties: the older)
            fitting = sorted((d for d in ordered[1:] if d.length <= bound), key=lambda d: -expected(d))
            for k in range(1, min(limit, len(fitting) + 1) + 1):
                batch = [head, *fitting[:k - 1]]
                rate = self.rate(batch)
                if rate > best_rate:  # strictly: ties keep the smaller batch
                    best, best_rate = batch, rate
        return sorted(best, key=by_arrival)

    def rate(self, batch: Sequence[ReadyDraft]) -> float:
        """Expected committed tokens per second of the forward that verifies `batch`."""
        rows = len(batch)
        seconds = self.cost.time(rows * max(d.forward_tokens + 1 for d in batch), rows)
        return sum(expected(d) for d in batch) / max(seconds, 1e-9)


def expected(d: ReadyDraft) -> float:
    """E: the tokens a verification of `d` commits, by its sequence's record (a prior before it has one)."""
    return d.expected_tokens if d.expected_tokens > 0 else d.length / 2 + 1
