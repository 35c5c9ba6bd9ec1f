"""What-if: re-simulate a recorded run in virtual time under another policy.

Outputs never depend on the policy (every sequence has its own random streams), so only the timing
is re-simulated. From a trace (or ``--json`` record) of a speculative run this takes, per sequence
and round: how long its worker drafted (from the end of the previous verification to the draft's
arrival in the run queue, so message latency is included), how long its verification took, and how
many tokens it committed. Then it replays the run queue: a draft arrives when its worker has drafted
it, the verifier asks the policy whenever it is free, a verification takes its recorded time, and the
worker starts the next round when the verdict is back. The result is the same events a live run
records, so the OS metrics, the summary and the Gantt chart come from the same code as `replay`'s.

What the model ignores: a verification's time is the recorded one for that (sequence, round),
whatever else ran, and the verifier takes the recorded run's median dispatch gap (a ready draft
waiting for a free verifier to start on it) before each; batching (a policy returning several
drafts) is refused, and effects of contention - a worker drafting faster because another was idle,
the verifier's caches - are not modelled. The draft length a policy sees is the run's ``--k``.
"""

from __future__ import annotations

import bisect
import heapq
from collections import defaultdict
from dataclasses import dataclass, field

from ....policies.base import PolicySettings, ReadyDraft
from ....policies.loader import load_policy
from ....scheduler.run_queue import PolicyFailure, checked_pick
from ...core.config import ConfigError, Mode, RunConfig
from ...core.deadline import policy_call
from ...core.events import VERIFIER, Event
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ...engine.record import worker_of


@dataclass(slots=True)
class Round:
    gap_s: float        # from the previous verdict (or the run's start) to the start of drafting
    draft_s: float      # from the start of drafting to the draft's arrival in the queue (sending included)
    verify_s: float
    committed: int


@dataclass(slots=True)
class Recorded:
    rounds: dict[int, list[Round]]   # each sequence's rounds, in order
    dispatch_s: float                # the verifier's median gap between a ready draft and its verification
    budgets: dict[int, int] | None = None  # a sequence's token budget, if not the run's --max-new-tokens
    deadlines: dict[int, float] | None = None  # a sequence's deadline (virtual seconds), for EDF exercises


@dataclass(slots=True)
class Prediction:
    policy: str
    events: list[Event] = field(default_factory=list)
    makespan_s: float = 0.0
    os: OsMetrics | None = None
    finished: dict[int, float] = field(default_factory=dict)   # each sequence's last verification's end
    missed: list[int] = field(default_factory=list)            # sequences that finished after their deadline


def recorded(config: RunConfig, events: list[Event], commits: list[tuple[float, int, int]]) -> Recorded:
    """Each sequence's rounds, from a recorded run's worker-side events and commits, and the verifier's
    dispatch gap (receiving a draft, asking the policy: time between verifications that a draft waits)."""
    if config.mode != Mode.SEED:
        raise ConfigError(f"what-if needs a --mode seed run (this one is --mode {config.mode})")
    if config.steps_aside or config.max_batch != 1:
        raise ConfigError("what-if re-simulates one draft per verification: record the run without "
                          "--step-aside and with --max-batch 1")
    t0 = min((e.start for e in events), default=0.0)
    by_seq: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e.role == "draft" and e.kind in ("draft", "queued", "verify"):
            by_seq[e.seq].append(e)
    tokens: dict[int, list[int]] = defaultdict(list)
    for _, seq, n in commits:
        tokens[seq].append(n)
    verifier_ends = sorted(e.end for e in events if e.role == "verifier" and e.kind == "verify")
    out, gaps = {}, []
    for seq, evs in by_seq.items():
        drafts, queued, verified = ([e for e in sorted(evs, key=lambda e: e.start) if e.kind == k]
                                    for k in ("draft", "queued", "verify"))
        ready_from, rounds = t0, []
        for d, q, v, n in zip(drafts, queued, verified, tokens[seq]):
            rounds.append(Round(max(d.start - ready_from, 0.0), max(q.start - d.start, 0.0), v.end - v.start, n))
            ready_from = v.end
        out[seq] = rounds
        gaps += [_dispatch_gap(q, v, verifier_ends) for q, v in zip(queued, verified)]
    known = sorted(g for g in gaps if g is not None)
    return Recorded(out, known[len(known) // 2] if known else 0.0)


def _dispatch_gap(queued: Event, verified: Event, verifier_ends: list[float]) -> float | None:
    """How long the verifier took to start this verification once it was free and the draft was there
    (`verifier_ends`: when its verifications ended, sorted)."""
    before = bisect.bisect_right(verifier_ends, verified.start)
    if before == 0:
        return None
    return max(verified.start - max(verifier_ends[before - 1], queued.start), 0.0)


def simulate(config: RunConfig, run: Recorded, policy_name: str) -> Prediction:
    """The run queue replayed under `policy_name`, in virtual time starting at 0."""
    rounds = run.rounds
    policy_cls = load_policy(policy_name, config.policy_timeout_s)
    policy = _ask(policy_name, config.policy_timeout_s, policy_cls, PolicySettings(max_batch=1))
    events: list[Event] = []
    arrivals: list[tuple[float, int, int]] = []   # (arrival, order, seq): drafts not yet in the queue
    done = {seq: 0 for seq in rounds}             # rounds verified
    committed = {seq: 0 for seq in rounds}
    order = 0
    for seq, rs in sorted(rounds.items()):
        if rs:
            start = rs[0].gap_s
            heapq.heappush(arrivals, (start + rs[0].draft_s, order, seq))
            events.append(_worker_event(config, "draft", start, start + rs[0].draft_s, seq))
            order += 1
    waiting: dict[int, ReadyDraft] = {}
    finished: dict[int, float] = {}
    now = idle_from = 0.0
    while arrivals or waiting:
        while arrivals and (arrivals[0][0] <= now or not waiting):
            t, o, seq = heapq.heappop(arrivals)
            now = max(now, t)
            waiting[seq] = _ready(config, seq, t, o, done[seq], committed[seq], _budget(config, run, seq),
                                  (run.deadlines or {}).get(seq))
        ready = list(waiting.values())
        choice = _ask(policy_name, config.policy_timeout_s, policy.pick, ready)
        try:
            picked = checked_pick(policy_name, choice, ready, 0)
        except PolicyFailure as exc:  # the run queue's words: a live run would have stopped the same way
            raise ConfigError(str(exc)) from None
        if len(picked) > 1:
            raise ConfigError(f"what-if cannot re-simulate policy {policy_name!r}: it picked {len(picked)} drafts "
                              "at once (batching is not modelled)")
        chosen = picked[0]
        seq = chosen.seq
        del waiting[seq]
        r = rounds[seq][done[seq]]
        start = now + run.dispatch_s
        if start > idle_from:
            events.append(Event(0, "verifier", VERIFIER, "idle", idle_from, start))
        end = start + r.verify_s
        events += [Event(0, "verifier", VERIFIER, "verify", start, end, seq),
                   _worker_event(config, "queued", chosen.arrival, start, seq),
                   _worker_event(config, "verify", start, end, seq)]
        _ask(policy_name, config.policy_timeout_s, policy.served, chosen, r.verify_s, r.committed)
        done[seq] += 1
        committed[seq] += r.committed
        finished[seq] = end
        if done[seq] < len(rounds[seq]):
            nxt = rounds[seq][done[seq]]
            begin = end + nxt.gap_s
            heapq.heappush(arrivals, (begin + nxt.draft_s, order, seq))
            events.append(_worker_event(config, "draft", begin, begin + nxt.draft_s, seq))
            order += 1
        now = idle_from = end
    per_worker: dict[int, int] = defaultdict(int)
    for seq, n in committed.items():
        per_worker[worker_of(config, seq)] += n
    missed = sorted(s for s, d in (run.deadlines or {}).items() if finished.get(s, float("inf")) > d)
    return Prediction(policy_name, events, now, measure_os(events, dict(per_worker)), finished, missed)


def _ask(name: str, seconds: float, call, *args):
    """A policy's constructor, pick or served, under the run's --policy-timeout: anything it raises becomes one
    line naming it (runtime/core/deadline.py: policy_call)."""
    method = "__init__" if isinstance(call, type) else call.__name__
    return policy_call(name, method, seconds, call, *args, error=ConfigError)


def _budget(config: RunConfig, run: Recorded, seq: int) -> int:
    return run.budgets[seq] if run.budgets else config.max_new_tokens


def _ready(config: RunConfig, seq: int, arrival: float, order: int, rnd: int, verified: int,
           budget: int, deadline: float | None) -> ReadyDraft:
    worker = worker_of(config, seq)
    return ReadyDraft(worker, seq, arrival, order, config.k, verified, config.priority_of(worker), rnd,
                      deadline=deadline, tokens_remaining=budget - verified, tickets=config.tickets_of(worker))


def _worker_event(config: RunConfig, kind: str, start: float, end: float, seq: int) -> Event:
    worker = worker_of(config, seq)
    return Event(1 + worker, "draft", worker, kind, start, end, seq)
