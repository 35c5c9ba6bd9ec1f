"""Batched verification: hand the verifier up to --max-batch ready drafts, oldest first, to check in
one target forward (beyond SEED, which verifies one draft per forward).

On a memory-bound target a forward over several short drafts costs little more than over one,
so verifying queued drafts together raises throughput; the price is that a draft may wait for
the batch it joins to be verified as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Policy, ReadyDraft, by_arrival


class Batch(Policy):
    name = "batch"

    def pick(self, ready: Sequence[ReadyDraft]) -> list[ReadyDraft]:
        ordered = sorted(ready, key=by_arrival)
        limit = self.settings.max_batch
        return ordered[:limit] if limit else ordered
