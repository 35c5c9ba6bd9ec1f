"""Arrivals in, pick order out: the drafts, run queues and read-outs the policy tests share."""

from __future__ import annotations

from specsched.policies import Policy, ReadyDraft
from specsched.runtime.core.messages import Draft
from specsched.scheduler.run_queue import RunQueue


def ready(worker: int, arrival: float, order: int, *, priority: int = 0, seq: int | None = None,
          length: int = 4, verified: int = 0) -> ReadyDraft:
    return ReadyDraft(worker=worker, seq=worker if seq is None else seq, arrival=arrival, order=order,
                      length=length, verified_tokens=verified, priority=priority)


def drain(policy: Policy, drafts: list[ReadyDraft]) -> list[int]:
    """Ask the policy again and again, removing each pick: the workers in the order served."""
    waiting = sorted(drafts, key=lambda d: d.order)  # the queue hands drafts oldest first
    served = []
    while waiting:
        choice = policy.pick(list(waiting))
        assert choice in waiting
        waiting.remove(choice)
        served.append(choice.worker)
    return served


def queue_with(policy: Policy, arrivals: list[tuple[int, float, int]]) -> RunQueue:
    """A RunQueue holding one draft per (worker, arrival, priority), pushed in list order."""
    q = RunQueue(policy)
    for worker, arrival, priority in arrivals:
        q.push(Draft.chain(worker, worker, 0, [1, 2, 3]), f"w{worker}".encode(), arrival=arrival,
               verified_tokens=0, priority=priority, round=0)
    return q


def pick_all(q: RunQueue) -> list[int]:
    served = []
    while len(q):
        (entry,) = q.pick()
        served.append(entry.draft.worker)
    return served
