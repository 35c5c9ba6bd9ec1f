"""An example custom policy: serve the sequence that has the fewest verified tokens.

Like shortest-remaining-time in an OS it evens out progress across thoughts; ties go to the draft
that arrived first. Use it with:  specsched run --policy docs/examples/least_progress.py:LeastProgress
"""

from specsched.policies import Policy


class LeastProgress(Policy):
    """Serve the sequence with the fewest verified tokens; ties go to the earliest arrival."""

    name = "least-progress"

    def pick(self, ready):
        return min(ready, key=lambda d: (d.verified_tokens, d.arrival, d.order))
