"""The policy contract: given the drafts that are ready, choose what the verifier checks next.

A policy is a small class. The run queue hands ``pick`` a non-empty list of ``ReadyDraft``
descriptions (oldest first) each time the verifier is free; ``pick`` returns one of them - or, for
a policy that batches, a list of them - and the verifier verifies that next. A policy sees only
scheduling facts, never tokens or model state, so it cannot change *what* is generated, only
*when*: outputs are identical under every policy.

What a policy may look at (``ReadyDraft``):
    worker           the draft worker's id (0..n-1)
    seq              the sequence the draft extends
    arrival          when the draft entered the run queue (time.monotonic() seconds)
    order            arrival counter: strictly increasing, breaks ties between equal arrivals
    length           number of draft tokens to verify (candidates)
    verified_tokens  tokens already committed for that sequence
    priority         the worker's static priority from --priorities (lower = more urgent)
    round            how many drafts this sequence has had verified before this one
    job              the job the draft belongs to (an engine runs many; a one-shot run is job 0)
    job_arrival      when that job was submitted (time.monotonic() seconds)
    job_priority     the job's priority (lower = more urgent; 0 unless the job says)
    deadline         the job's deadline (time.monotonic() seconds), or None
    tokens_remaining the sequence's token budget not yet committed (max_new_tokens - verified_tokens)
    tickets          the worker's share for proportional-share policies (--tickets; 100 unless given)
    expected_tokens  the sequence's running mean of tokens committed per verification (0 before its first)
    lanes            branch-lane tokens the draft adds to the forward (Self-Draft): exploring, not verifying
    forward_tokens   length + lanes: what the draft adds to a target forward (what its verification costs)
    kind             "verify" (the draft has candidates) or "branch" (lanes only: it explores, and commits
                     just the one token any forward commits)

What it returns: one ``ReadyDraft`` from the list (or a non-empty list of them, to batch).
Returning anything else, or raising, stops the run with one line naming the policy.

State: a policy may keep state between calls (round-robin remembers whom it served last).
``self.settings`` holds the run's scheduling options (e.g. ``max_batch``); ``self.cost`` is the
verifier's measured forward cost (``CostCurve``: ``time(tokens, rows)`` in seconds, see
runtime/core/costs.py), refreshed before every pick, or None until it has timed a forward.
Optionally, ``served(draft,
seconds, committed)`` is called after each verification of a picked draft with the verifier time it
took (a batch's time shared equally) and the tokens it committed: what MLFQ's allotments and CFS's
virtual runtime are made of. It must not raise (if it does, the run stops as for ``pick``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..runtime.core.costs import CostCurve


@dataclass(frozen=True, slots=True)
class ReadyDraft:
    worker: int
    seq: int
    arrival: float
    order: int
    length: int
    verified_tokens: int
    priority: int = 0
    round: int = 0
    job: int = 0
    job_arrival: float = 0.0
    job_priority: int = 0
    deadline: float | None = None
    tokens_remaining: int = 0
    tickets: int = 100
    expected_tokens: float = 0.0
    lanes: int = 0

    @property
    def forward_tokens(self) -> int:
        """Tokens the draft adds to a target forward: its candidates and its branch lanes."""
        return self.length + self.lanes

    @property
    def kind(self) -> str:
        return "verify" if self.length or not self.lanes else "branch"


@dataclass(frozen=True, slots=True)
class PolicySettings:
    max_batch: int = 1   # most drafts one pick may return; 0 = no limit
    extra: dict = field(default_factory=dict)


class Policy(ABC):
    """Base class of every scheduling policy. Subclasses set ``name`` and implement ``pick``."""

    name: str = ""  # shown in the run's output and errors; empty = the class name

    def __init__(self, settings: PolicySettings | None = None) -> None:
        self.settings = settings or PolicySettings()
        self.cost: CostCurve | None = None  # set by the run queue before each pick

    @abstractmethod
    def pick(self, ready: Sequence[ReadyDraft]) -> ReadyDraft | Sequence[ReadyDraft]:
        """Choose the next draft(s) to verify from ``ready`` (non-empty, oldest first)."""

    def served(self, draft: ReadyDraft, seconds: float, committed: int) -> None:
        """A picked draft was verified: `seconds` of verifier time, `committed` tokens. Default: ignore."""


def by_arrival(d: ReadyDraft) -> tuple[float, int]:
    """The tie-break every built-in policy ends with: earlier arrival, then lower counter."""
    return (d.arrival, d.order)
