"""The run queue: drafts waiting for the verifier, and the policy that orders them."""

from __future__ import annotations

import itertools
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..policies.base import Policy, PolicySettings, ReadyDraft
from ..policies.loader import load_policy
from ..runtime.core.config import RunConfig
from ..runtime.core.costs import CostCurve
from ..runtime.core.deadline import policy_call
from ..runtime.core.messages import Draft


class PolicyFailure(RuntimeError):
    """The scheduling policy raised, returned something that is not a ready draft, or ran past its deadline."""


@dataclass(slots=True)
class Queued:
    info: ReadyDraft
    draft: Draft
    reply_to: bytes  # the worker's ZeroMQ identity


@dataclass(slots=True)
class Reply:
    """What one step produced for one draft: its verdict, and where to send it."""
    verdict: object   # a Verdict, or a BeamTask: anything with to_frames()
    reply_to: bytes
    worker: int


class RunQueue:
    def __init__(self, policy: Policy, timeout_s: float = 0.0) -> None:
        self.policy = policy
        self.timeout_s = timeout_s  # --policy-timeout: the most one pick or served may take; 0 = no limit
        self._waiting: list[Queued] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def oldest_arrival(self) -> float:
        return min(q.info.arrival for q in self._waiting)

    @property
    def newest_arrival(self) -> float:
        return max(q.info.arrival for q in self._waiting)

    def drop(self, gone) -> None:
        """Remove the entries for which `gone(entry)` holds (the drafts of a cancelled job)."""
        self._waiting = [q for q in self._waiting if not gone(q)]

    def sequences(self) -> set[int]:
        return {q.draft.seq for q in self._waiting}

    def push(self, draft: Draft, reply_to: bytes, *, arrival: float, verified_tokens: int,
             priority: int, round: int, **job: object) -> ReadyDraft:
        """Queue a draft; `job` holds the job facts a policy may see (ReadyDraft's job fields)."""
        info = ReadyDraft(draft.worker, draft.seq, arrival, next(self._order), draft.candidates,
                          verified_tokens, priority, round, lanes=draft.lanes, **job)
        self._waiting.append(Queued(info, draft, reply_to))
        return info

    def pick(self, cost: CostCurve | None = None) -> list[Queued]:
        """Ask the policy (its ``cost`` refreshed); remove and return what it chose (one entry, or several)."""
        ready = [q.info for q in self._waiting]
        self.policy.cost = cost
        name = self.policy.name or type(self.policy).__name__
        choice = policy_call(name, "pick", self.timeout_s, self.policy.pick, ready, error=PolicyFailure)
        chosen = checked_pick(name, choice, ready, self.policy.settings.max_batch)
        by_order = {q.info.order: q for q in self._waiting}
        taken = {c.order for c in chosen}
        self._waiting = [q for q in self._waiting if q.info.order not in taken]
        return [by_order[c.order] for c in chosen]


    def served(self, picked: list[Queued], seconds: float, committed: list[int]) -> None:
        """Tell the policy what each verified pick cost (``Policy.served``); its errors are PolicyFailures."""
        name = self.policy.name or type(self.policy).__name__
        for entry, n in zip(picked, committed):
            policy_call(name, "served", self.timeout_s, self.policy.served, entry.info, seconds, n,
                        error=PolicyFailure)


def checked_pick(name: str, choice: object, ready: list[ReadyDraft], limit: int) -> list[ReadyDraft]:
    """What policy `name`'s pick returned, as the drafts it chose from `ready`, if it kept the contract: one of
    them, or a non-empty sequence of distinct ones, at most `limit` (--max-batch; 0 = no limit). Else a
    PolicyFailure that says what it returned. The run queue and the what-if simulator both ask this."""
    if isinstance(choice, ReadyDraft):
        chosen = [choice]
    else:  # a batch: a sequence (list, tuple) of ready drafts, as Policy.pick is typed; else refused below
        chosen = list(choice) if isinstance(choice, Sequence) and not isinstance(choice, str) else []
    by_order = {d.order: d for d in ready}
    if not chosen or any(not isinstance(c, ReadyDraft) or by_order.get(c.order) != c for c in chosen):
        raise PolicyFailure(f"policy {name!r} returned {_describe(choice)}, which is not one of the ready "
                            "drafts: pick must return a ReadyDraft from its argument, or a non-empty list "
                            "of them")
    if limit and len(chosen) > limit:
        raise PolicyFailure(f"policy {name!r} picked {len(chosen)} drafts; --max-batch allows {limit}")
    if len({c.order for c in chosen}) != len(chosen):
        raise PolicyFailure(f"policy {name!r} picked the same draft twice")
    return chosen


def scheduling_key(config: RunConfig) -> tuple:
    """What the run queue's discipline depends on. Concurrent speculative jobs must agree on it; the
    engine holds back a job whose key differs until the jobs with the other key have finished."""
    return (config.policy, config.max_batch, config.lockstep)


def start_policy(config: RunConfig):
    """Load and construct the job's policy; a constructor that raises stops the run naming it."""
    policy_cls = load_policy(config.policy, config.supervision.policy_timeout_s)
    name = policy_cls.name or policy_cls.__name__
    policy = policy_call(name, "__init__", config.supervision.policy_timeout_s, policy_cls,
                         PolicySettings(max_batch=config.max_batch), error=PolicyFailure)
    if not isinstance(getattr(policy, "settings", None), PolicySettings):
        raise PolicyFailure(f"policy {name!r} has no settings: its __init__ must call super().__init__(settings)")
    return policy


def _describe(value: object) -> str:
    """What a policy returned, for its error line: short, one line, even if its repr is neither."""
    try:
        text = reprlib.repr(value)
    except Exception:
        text = "<unprintable>"
    return f"{' '.join(text.split())} ({type(value).__name__})"
