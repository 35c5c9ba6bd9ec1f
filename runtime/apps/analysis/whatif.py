"""What-if: re-simulate a recorded run, or a workload of jobs arriving over time, in virtual time under
another policy.

Outputs never depend on the policy (every sequence has its own random streams), so only the timing is
re-simulated, from what the recording says no policy decides (recorded_run.py): each round's drafting and
its verification's time alone, each turn's dispatch, the verifier's start-up. The run queue is replayed as
scheduler/serve.py runs it: a draft is sent when its worker has drafted it; when the verifier comes free it
takes dispatch time (sending verdicts, reading its socket, asking the policy) and the policy picks among the
drafts sent by then, the same policy classes a live run uses (``served`` included, on the virtual clock);
a verification takes its recorded time - a batch its drafts' mean and the fitted cost of the other rows
(forward_cost.py) - and the worker starts the next round when the verdict is back. The result is
the events a live run records, so the OS metrics, the summary and the Gantt chart come from the same code
as `replay`'s.

A draft is readable its recorded transit after its sending (a draft sent just before a verification starts
misses it). What the model ignores: contention between processes that another order would change (a worker
drafting faster because another was idle; a batch's workers, woken together, starting their drafts later),
and the order the verifier's socket delivers drafts sent during one verification (taken as the order they
were sent).
"""

from __future__ import annotations

import functools
import heapq
import inspect
from collections import defaultdict
from dataclasses import dataclass, field

from ....policies.base import PolicySettings, ReadyDraft
from ....policies.loader import load_policy
from ....scheduler.run_queue import PolicyFailure, checked_pick
from ...core.config import ConfigError, RunConfig
from ...core.costs import CostFit
from ...core.deadline import policy_call
from ...core.events import VERIFIER, Event
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ...engine.record import worker_of
from ..run.flag_config import BATCHING
from .forward_cost import batch_extra
from .recorded_run import Recorded


@dataclass(slots=True)
class Prediction:
    policy: str
    events: list[Event] = field(default_factory=list)
    makespan_s: float = 0.0
    os: OsMetrics | None = None
    finished: dict[int, float] = field(default_factory=dict)   # each sequence's last verification's end
    missed: list[int] = field(default_factory=list)            # sequences that finished after their deadline


@dataclass(frozen=True, slots=True)
class _Sent:
    seq: int
    sent: float        # when its worker sent it (the start of its wait, as a live run records it)
    admitted: float    # when the verifier read it: after the verification in progress, if one was


def simulate(config: RunConfig, run: Recorded, policy_name: str, *, max_batch: int | None = None) -> Prediction:
    """The run queue replayed under `policy_name`, in virtual time from 0. `max_batch`: drafts one forward may
    verify (0 = all); by default as `specsched run` sets it: all for the batching policies, else the run's."""
    limit = max_batch if max_batch is not None else 0 if policy_name in BATCHING else config.max_batch
    return _Replay(config, run, policy_name, limit).play()


class _Replay:
    def __init__(self, config: RunConfig, run: Recorded, name: str, limit: int) -> None:
        self.config, self.run, self.name, self.limit = config, run, name, limit
        self.now = 0.0                                   # the virtual clock a policy reads (MLFQ's boosts)
        self.policy = _construct(name, config.supervision.policy_timeout_s, PolicySettings(max_batch=limit),
                                 lambda: self.now)
        self.events: list[Event] = []
        self.sent: list[tuple[float, int, int]] = []     # (sent, order, seq): drafts not yet in the queue
        self.queue: dict[int, tuple[_Sent, ReadyDraft]] = {}
        self.done = {seq: 0 for seq in run.rounds}       # rounds verified
        self.committed = {seq: 0 for seq in run.rounds}
        self.finished: dict[int, float] = {}
        self.order = 0                                   # arrival counter: ties between drafts sent together
        self.fit = CostFit()                             # the verifier's live fit of its forwards (goodput reads it)
        self.rows = 1                                    # drafts the last forward verified: verdicts to send

    def play(self) -> Prediction:
        for seq, rs in sorted(self.run.rounds.items()):
            if rs:
                self._draft(seq, rs[0].gap_s)
        free, turn = 0.0, 0
        while self.sent or self.queue:
            start = self._start(free, turn)
            self._admit(start, free, turn)
            self.now = start
            picked = self._pick()
            free = self._verify(picked, free, start, turn)
            turn += 1
        per_worker: dict[int, int] = defaultdict(int)
        for seq, n in self.committed.items():
            per_worker[worker_of(self.config, seq)] += n
        deadlines = {s: self.run.job(s).deadline_s for s in self.run.rounds}
        missed = sorted(s for s, d in deadlines.items() if d is not None and self.finished.get(s, float("inf")) > d)
        return Prediction(self.name, self.events, free, measure_os(self.events, dict(per_worker)), self.finished,
                          missed)

    def _start(self, free: float, turn: int) -> float:
        """When the verifier starts its next verification: after its dispatch time if a draft was readable (sent,
        and its transit over) while it was busy, else its recorded wait after the next sending (the first: when
        the recording's began)."""
        d = self.run.dispatch
        first = min([s.sent for s, _ in self.queue.values()] + ([self.sent[0][0]] if self.sent else []))
        if turn == 0:
            return max(first, d.first_start_s) if d.first_start_s is not None else first + d.idle_s
        # its messages: the verdicts it sends, the drafts it will read (those there by the time its base is spent)
        reads = sum(1 for t, _, _ in self.sent if self._readable(t, turn) <= free + d.busy(turn))
        busy = d.busy(turn, self.rows + reads)
        return free + busy if self._readable(first, turn) <= free else max(free + busy, first + d.idle_s)

    def _readable(self, sent: float, turn: int) -> float:
        """When a draft sent at `sent` is there for the verifier to read: its recorded transit later (the first
        turn's reads are the recording's own)."""
        return sent + (self.run.dispatch.transit_s if turn else 0.0)

    def _admit(self, start: float, free: float, turn: int) -> None:
        """Into the run queue: the drafts readable (sent, and their transit over) by the verifier's last read
        before `start` (the first turn: those the recording's verifier had read by then), stamped when read,
        after the verification in progress."""
        seen = self.run.dispatch.first_seen if turn == 0 else frozenset()
        read = max(start - self.run.dispatch.read_s, free) if turn else start
        if not self.queue and self.sent and self._readable(self.sent[0][0], turn) > read:
            read = self._readable(self.sent[0][0], turn)  # it was waiting: it read the draft that woke it
        if seen and not any(seq in seen and t <= read for t, _, seq in self.sent):
            seen = frozenset()
        kept = []
        while self.sent and self._readable(self.sent[0][0], turn) <= read:
            t, order, seq = heapq.heappop(self.sent)
            if seen and seq not in seen:
                kept.append((t, order, seq))
                continue
            self._queue(_Sent(seq, t, max(t, read)))
        for item in kept:
            heapq.heappush(self.sent, item)

    def _queue(self, s: _Sent) -> None:
        seq, job = s.seq, self.run.job(s.seq)
        worker, verified, rnd = worker_of(self.config, seq), self.committed[seq], self.done[seq]
        budget = job.budget or self.config.max_new_tokens
        length = max(min(self.config.shape.k, budget - verified - 1), 0)  # a worker never drafts past its budget
        # a workload's policy saw its workers by their ids in the engine's pool (rr and mlfq take turns by them)
        seen_as = worker if job.worker is None else job.worker
        info = ReadyDraft(seen_as, seq, s.admitted, self.order, length, verified, self.config.priority_of(worker), rnd,
                          job=job.job, job_arrival=job.arrival_s, job_priority=job.priority, deadline=job.deadline_s,
                          tokens_remaining=budget - verified, tickets=self.config.tickets_of(worker),
                          expected_tokens=verified / rnd if rnd else 0.0)
        self.order += 1
        self.queue[seq] = (s, info)

    def _pick(self) -> list[tuple[_Sent, ReadyDraft]]:
        ready = [info for _, info in sorted(self.queue.values(), key=lambda q: q[1].order)]
        # what the live verifier would tell it: its fit of the forwards so far (none before the first)
        self.policy.cost = self.fit.curve()
        choice = _ask(self.name, self.config.supervision.policy_timeout_s, self.policy.pick, ready)
        try:
            chosen = checked_pick(self.name, choice, ready, self.limit)
        except PolicyFailure as exc:  # the run queue's words: a live run would have stopped the same way
            raise ConfigError(str(exc)) from None
        return [self.queue.pop(c.seq) for c in chosen]

    def _verify(self, picked: list[tuple[_Sent, ReadyDraft]], free: float, start: float, turn: int) -> float:
        rounds = [self.run.rounds[s.seq][self.done[s.seq]] for s, _ in picked]
        # a batch: its drafts' mean forward alone (each holds its own noise: their largest would add it up) and
        # the fitted cost of the rows beyond one, then each row's postprocess in turn (acceptance runs row by row)
        forward = sum(r.verify_s - r.post_s for r in rounds) / len(rounds)
        forward += batch_extra(self.run.cost, [i.length for _, i in picked])
        forward += self.run.dispatch.first_extra_s if turn == 0 else 0.0   # the verifier's start-up is its first turn's
        self.fit.add_forward([i.length + 1 for _, i in picked], forward)  # as the live verifier fits: forwards alone
        end = start + forward + sum(r.post_s for r in rounds)
        self.rows = len(picked)
        if start > free:
            self.events.append(Event(0, "verifier", VERIFIER, "idle", free, start))
        self.events.append(Event(0, "verifier", VERIFIER, "verify", start, end, picked[0][0].seq if len(picked) == 1
                                 else -1))
        for (s, info), r in zip(picked, rounds):
            self.events += [self._worker_event("queued", s.sent, start, s.seq, s.admitted),
                            self._worker_event("verify", start, end, s.seq)]
            _ask(self.name, self.config.supervision.policy_timeout_s, self.policy.served, info,
                 (end - start) / len(picked), r.committed)
            self.done[s.seq] += 1
            self.committed[s.seq] += r.committed
            self.finished[s.seq] = end
            if self.done[s.seq] < len(self.run.rounds[s.seq]):
                self._draft(s.seq, end + self.run.rounds[s.seq][self.done[s.seq]].gap_s)
        return end

    def _draft(self, seq: int, begin: float) -> None:
        sent = begin + self.run.rounds[seq][self.done[seq]].draft_s
        self.events.append(self._worker_event("draft", begin, sent, seq))
        heapq.heappush(self.sent, (sent, self.order, seq))
        self.order += 1

    def _worker_event(self, kind: str, start: float, end: float, seq: int, admitted: float | None = None) -> Event:
        worker = worker_of(self.config, seq)
        return Event(1 + worker, "draft", worker, kind, start, end, seq, admitted=admitted)


def _construct(name: str, seconds: float, settings: PolicySettings, clock):
    """The policy, built as the run queue builds it; one that keeps time (a ``clock`` argument: MLFQ's boosts)
    gets the virtual clock."""
    cls = load_policy(name, seconds)
    try:
        takes_clock = "clock" in inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a class whose signature cannot be read: built without one
        takes_clock = False
    make = functools.partial(cls, clock=clock) if takes_clock else cls
    return policy_call(name, "__init__", seconds, make, settings, error=ConfigError)


def _ask(name: str, seconds: float, call, *args):
    """A policy's pick or served, under the run's --policy-timeout: anything it raises becomes one line naming it
    (runtime/core/deadline.py: policy_call)."""
    return policy_call(name, call.__name__, seconds, call, *args, error=ConfigError)
