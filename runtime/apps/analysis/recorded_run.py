"""What a recorded run tells the what-if simulator (whatif.py): each sequence's rounds and job, and how the
verifier's loop spends its time around its verifications, measured from the trace's events.

Only what no policy decides is taken from the recording. Per sequence and round: the time from the verdict
before (round 0: from the run's start, so a job's arrival is in it) to the start of drafting, the drafting
until the draft was sent, the verification's time alone in a forward, and the tokens it committed. Per turn
of the verifier (its n-th verification), its *dispatch*: from the end of the verification before to the start
of this one, when a draft was already waiting (scheduler/serve.py sends the verdicts, reads its socket,
asks the policy). The transit: from a draft's sending to the verifier's read of it, when the verifier was
waiting on its socket. The start-up: when the verifier's first verification began, which first drafts it had
read by then, and how much longer its first forward took than the round's others. The error analysis behind
each of these is in docs/teaching.md ("Why predictions hold").
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core.config import ConfigError, Mode, RunConfig
from ...core.costs import CostCurve
from ...core.events import Event
from ..run.flag_config import BATCHING
from ..run.trace import load_events
from .forward_cost import SIGNIFICANT, batch_extra, fit_cost, least_squares


@dataclass(frozen=True, slots=True)
class Round:
    gap_s: float        # from the previous verdict (round 0: the run's start) to the start of drafting
    draft_s: float      # from the start of drafting to the draft's sending
    verify_s: float     # its verification, alone in a forward, and its own postprocess
    committed: int
    post_s: float = 0.0  # of verify_s, its postprocess (the verifier's "resample": acceptance, row by row)

    def __post_init__(self) -> None:
        if min(self.gap_s, self.draft_s, self.verify_s, self.post_s) < 0 or self.post_s > self.verify_s \
                or self.committed < 0:
            raise ValueError(f"a round's times and tokens are >= 0, got {self}")


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a policy may see of a sequence's job (ReadyDraft's job fields), on the virtual clock."""
    job: int = 0
    arrival_s: float = 0.0
    priority: int = 0
    deadline_s: float | None = None   # absolute, on the virtual clock
    budget: int | None = None         # its --max-new-tokens, where not the run's
    worker: int | None = None         # the engine's id of the worker that drafted it, where not the sequence's


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The verifier's loop around its verifications; all zero (an exercise's verifier) unless measured."""
    busy_s: tuple[float | None, ...] = ()  # turn n's gap after the verification before, a draft waiting, less its
                                           # messages beyond one in and one out; None: no such gap recorded
    mean_busy_s: float = 0.0               # for a turn without a gap of its own (its mean keeps sums right)
    per_message_s: float = 0.0             # the loop's time for each further draft read or verdict sent
    idle_s: float = 0.0                    # from a draft's sending to its verification, the verifier waiting
    read_s: float = 0.0                    # from its last read of the socket to the verification's start: the
                                           # policy picks among what it read (a draft sent since waits a turn)
    first_start_s: float | None = None     # when the first verification began; None: as soon as a draft is there
    first_seen: frozenset[int] = frozenset()  # the sequences whose first drafts the verifier had read by then
    first_extra_s: float = 0.0             # the first forward's time over its round's typical time
    transit_s: float = 0.0                 # from a draft's sending to the verifier's read of it, the verifier
                                           # waiting on its socket: a draft sent less before a read misses it

    def __post_init__(self) -> None:
        if min(self.mean_busy_s, self.idle_s, self.read_s, self.first_extra_s, self.per_message_s, self.transit_s,
               *(g for g in self.busy_s if g is not None)) < 0:
            raise ValueError(f"dispatch times are >= 0, got {self}")

    def busy(self, turn: int, messages: int = 2) -> float:
        """Turn n's dispatch when the loop reads and sends `messages` in all (one in, one out: its base)."""
        gap = self.busy_s[turn] if turn < len(self.busy_s) else None
        return (self.mean_busy_s if gap is None else gap) + self.per_message_s * max(messages - 2, 0)


@dataclass(slots=True)
class Recorded:
    rounds: dict[int, list[Round]]                             # each sequence's rounds, in order
    dispatch: Dispatch = field(default_factory=Dispatch)
    jobs: dict[int, JobFacts] = field(default_factory=dict)    # each sequence's job; absent: job 0 at 0
    cost: CostCurve | None = None                              # a forward's cost, fitted (forward_cost.py)

    def job(self, seq: int) -> JobFacts:
        return self.jobs.get(seq, JobFacts())


def recorded(config: RunConfig, events: list[Event], commits: list[tuple[float, int, int]], *,
             workload: dict | None = None) -> Recorded:
    """A recorded --mode seed run (or workload: its trace's ``workload`` section) as the simulator's input."""
    if config.mode != Mode.SEED:
        raise ConfigError(f"what-if needs a --mode seed run (this one is --mode {config.mode})")
    if config.steps_aside or config.lockstep:
        raise ConfigError("what-if re-simulates a run queue that each draft enters alone: record the run without "
                          "--step-aside and --lockstep")
    t0 = min((e.start for e in events), default=0.0)
    if workload:  # the workload's start: its first job's arrival
        t0 = min(t0, float(workload["started"]))
    turns = _turns(events)
    by_seq: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e.role == "draft" and e.kind in ("draft", "verify"):
            by_seq[e.seq].append(e)
    tokens: dict[int, list[int]] = defaultdict(list)
    for _, seq, n in sorted(commits):
        tokens[seq].append(n)
    jobs = _jobs(workload, t0)
    lengths = {}  # (sequence, round) -> its draft's length: k, or what its budget left (draft_worker.py)
    for seq, ns in tokens.items():
        budget = jobs[seq].budget if seq in jobs and jobs[seq].budget else config.max_new_tokens
        lengths |= {(seq, r): max(min(config.shape.k, budget - sum(ns[:r]) - 1), 0) for r in range(1, len(ns))}
    cost = fit_cost(events, lengths)
    rows: dict[float, list[int]] = defaultdict(list)
    for seq, evs in by_seq.items():
        for r, v in enumerate(sorted((e for e in evs if e.kind == "verify"), key=lambda e: e.start)):
            rows[v.start].append(lengths.get((seq, r), config.shape.k))
    # a verification's postprocess ends when its drafts' verify events do: a batch's, shared by its rows
    post = {e.end: e.duration for e in events if e.role == "verifier" and e.kind == "resample"}
    rounds: dict[int, list[Round]] = {}
    for seq, evs in by_seq.items():
        drafts, verified = ([e for e in sorted(evs, key=lambda e: e.start) if e.kind == k] for k in ("draft", "verify"))
        ready_from, rounds[seq] = t0, []
        for d, v, n in zip(drafts, verified, tokens[seq]):
            batch_post = min(post.get(v.end, 0.0), v.duration)
            own_post = batch_post / len(rows[v.start])
            # a batch's: its forward as if alone, and its own row's share of the postprocess
            alone = max(v.duration - batch_post - batch_extra(cost, rows[v.start]), 0.0) + own_post
            rounds[seq].append(Round(max(d.start - ready_from, 0.0), d.duration, alone, n, own_post))
            ready_from = v.end
    dispatch = _dispatch(turns, rounds, t0)
    for w in turns[0][2] if turns else []:  # the start-up is the first turn's, whoever takes it (whatif.py)
        r = rounds[w.seq][0]
        rounds[w.seq][0] = Round(r.gap_s, r.draft_s, max(r.verify_s - dispatch.first_extra_s, r.post_s), r.committed,
                                 r.post_s)
    return Recorded(rounds, dispatch, jobs, cost)


def from_trace(path: str, batch_cost: CostCurve | None = None) -> tuple[dict, RunConfig, list[Event], Recorded]:
    """A `specsched run --trace` file (of a run or a workload): its data, config, events and the simulator's input.
    `batch_cost` (read_batch_cost) replaces the trace's own cost fit: the simulator prices the rows of a batch
    beyond one by it (forward_cost.batch_extra), which a run that verified one draft at a time cannot show."""
    data, events = load_events(path)
    commits = (data.get("trace") or {}).get("commits")
    if commits is None:
        raise ConfigError(f"{path}: no trace section: record the run with `specsched run --trace PATH`")
    config = RunConfig.from_dict(data["config"])
    run = recorded(config, events, [(float(t), int(s), int(n)) for t, s, n in commits], workload=data.get("workload"))
    if batch_cost is not None:
        run.cost = batch_cost
    return data, config, events, run


def unpriced_rows(policies: list[str], cost: CostCurve | None, batch_cost: CostCurve | None) -> str | None:
    """The line said when a batching policy is predicted with an extra batch row priced at 0: the recording's
    own fit (`cost`) has no c and no --batch-cost gave one (whatif and teach --trace say it alike)."""
    if batch_cost is not None or not any(name in BATCHING for name in policies) or (cost is not None and cost.c):
        return None
    return ("What an extra batch row costs (c) is taken as 0: the recorded forwards each read one draft, which "
            "cannot show it (--batch-cost RUN.json takes it from a run under batch on the same machine).")


def read_batch_cost(path: str) -> CostCurve:
    """The live cost fit (`cost_curve`) of a run's record or trace, for --batch-cost; one line if it has none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--batch-cost {path}: {exc}") from None
    curve = CostCurve.from_list(data.get("cost_curve") if isinstance(data, dict) else None)
    if curve is None:
        raise ConfigError(f"--batch-cost {path}: no cost_curve (a record or trace of a run that verified)")
    return curve


def _turns(events: list[Event]) -> list[tuple[float, float, list[Event]]]:
    """The verifier's verifications in order, each (start, end, its drafts' queued events): from the workers'
    side, where a batch is the drafts whose verifications started together."""
    waits = {(e.seq, e.end): e for e in events if e.role == "draft" and e.kind == "queued"}
    by_start: dict[float, list[Event]] = defaultdict(list)
    for v in (e for e in events if e.role == "draft" and e.kind == "verify"):
        by_start[v.start].append(v)
    return [(start, max(v.end for v in vs), [waits[v.seq, v.start] for v in vs if (v.seq, v.start) in waits])
            for start, vs in sorted(by_start.items())]


def _dispatch(turns: list[tuple[float, float, list[Event]]], rounds: dict[int, list[Round]], t0: float) -> Dispatch:
    """Each turn's gap after the one before when a draft was waiting, sent before it ended; the gap from a
    sending to its verification when the verifier had nothing; the start-up of the first."""
    if not turns:
        return Dispatch()
    busy: list[float | None] = [None]
    extra: list[int] = [0]  # messages beyond one in and one out: drafts read in its drain, verdicts sent before
    idle: list[tuple[float, float, float | None]] = []  # (how long after the verification before it was sent,
    # its gap to the verification, to the verifier's read of it)
    read = []
    stamps = sorted(w.admitted for _, _, waits in turns for w in waits if w.admitted is not None)
    for (_, before, rows), (start, _, waits) in zip(turns, turns[1:]):
        sent = min((w.start for w in waits), default=before)
        busy.append(start - before if sent <= before else None)
        extra.append(max(bisect.bisect_right(stamps, start) - bisect.bisect_right(stamps, before) + len(rows) - 2, 0))
        if sent > before:
            woke = min(waits, key=lambda w: w.start)
            idle.append((sent - before, start - sent, None if woke.admitted is None else woke.admitted - sent))
        mine = [w.admitted for w in waits if w.admitted is not None and before < w.admitted <= start]
        if sent <= before and mine:  # read after the verification before ended: how long before its own start
            read.append(start - max(mine))
    per_message = _per_message([(g, x) for g, x in zip(busy, extra) if g is not None])
    busy = [None if g is None else max(g - per_message * x, 0.0) for g, x in zip(busy, extra)]
    known = [g for g in busy if g is not None]
    mean_busy = statistics.fmean(known) if known else 0.0
    # a draft sent just after a verification ended met the loop still busy with it: only a draft sent once the
    # loop's usual dispatch was over found it waiting
    found = [i for i in idle if i[0] > mean_busy] or idle
    waited = [g for _, g, _ in found]
    transit = [t for _, _, t in found if t is not None and t >= 0]
    idle_s = statistics.median(waited) if waited else mean_busy
    start, end, waits = turns[0]
    first = {w.seq for w in waits}
    seen = frozenset(w.seq for w in _first_drafts(turns) if w.admitted is not None and w.admitted <= start) or \
        frozenset(first)
    return Dispatch(tuple(busy), mean_busy, per_message, idle_s,
                    min(statistics.median(read), mean_busy) if read else 0.0, start - t0, seen,
                    _first_extra(end - start, first, rounds),
                    min(statistics.median(transit), idle_s) if transit else 0.0)


def _per_message(gaps: list[tuple[float, int]]) -> float:
    """The slope of a turn's dispatch over its further messages, where the turns tell it apart from noise
    (forward_cost.py's rule); 0 where they do not (a run whose drains read one draft each)."""
    if len(gaps) < 3 or len({x for _, x in gaps}) < 2:
        return 0.0
    y = np.array([g for g, _ in gaps])
    x = np.array([[1.0, float(m)] for _, m in gaps])
    coef, se = least_squares(x, y)
    return float(coef[1]) if coef[1] > SIGNIFICANT * se[1] else 0.0


def _first_drafts(turns: list[tuple[float, float, list[Event]]]) -> list[Event]:
    """Each sequence's first wait in the run queue."""
    firsts: dict[int, Event] = {}
    for _, _, waits in turns:
        for w in waits:
            firsts.setdefault(w.seq, w)
    return list(firsts.values())


def _first_extra(first_s: float, seqs: set[int], rounds: dict[int, list[Round]]) -> float:
    """How much longer the first forward took than a first round's verification typically takes (the
    verifier's start-up), with the other sequences' first rounds as the yardstick."""
    others = [rs[0].verify_s for s, rs in rounds.items() if rs and s not in seqs]
    return max(first_s - statistics.median(others), 0.0) if others else 0.0


def _jobs(workload: dict | None, t0: float) -> dict[int, JobFacts]:
    """Each sequence's job, from a workload trace (workload_trace.py); a one-job run has none."""
    out = {}
    for i, job in enumerate((workload or {}).get("jobs", [])):
        arrival, first = float(job["started"]) - t0, int(job["first_seq"])
        deadline, workers = job.get("deadline_s"), job.get("workers") or []
        for seq in range(first, first + int(job["sequences"])):  # --mode seed: a worker per sequence
            out[seq] = JobFacts(i, arrival, int(job.get("priority", 0)),
                                None if deadline is None else arrival + float(deadline), job.get("max_new_tokens"),
                                int(workers[seq - first]) if seq - first < len(workers) else None)
    return out
