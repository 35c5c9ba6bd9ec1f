"""A job as the engine tracks it: from submission to its record.

The verifier and the workers speak in engine-wide ids (global sequence ids, pool worker ids); a job's
record speaks in its own (sequences 0..n-1, workers 0..n-1), exactly as a one-shot run's does, so
everything downstream - metrics, the OS view of scheduling, the live view, traces - reads a job the
same way whatever else the engine was doing. ``JobRun`` holds that translation and the job's
``Collected`` (what its processes reported).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.beam_state import BeamState
from ..core.config import Mode, RunConfig
from ..core.events import Event
from .collected import Collected
from .record import worker_of


class Phase(enum.Enum):
    PENDING = "pending"      # submitted; waits for workers, or for jobs of another policy to finish
    ANNOUNCED = "announced"  # sent to the verifier, waiting for its acknowledgement
    RUNNING = "running"
    DONE = "done"


@dataclass(slots=True)
class JobMeta:
    """What a job carries besides its run settings: when it arrived, how urgent it is, a name."""
    priority: int = 0
    deadline_s: float | None = None   # relative to submission
    name: str = ""


@dataclass
class JobRun:
    id: int
    config: RunConfig
    prompts: list[list[int]]           # tokenised, one per sequence
    meta: JobMeta
    first_seq: int                     # global id of sequence 0
    submitted: float = field(default_factory=time.monotonic)
    on_update: Callable[[Collected], None] | None = None
    phase: Phase = Phase.PENDING
    workers: list[int] = field(default_factory=list)    # pool ids; local worker i is workers[i]
    idle: set[int] = field(default_factory=set)         # pool workers that finished their assignment
    spawned: int = 0                   # workers started for this job (models it had to load)
    admitted: float | None = None
    collected: Collected = field(default_factory=Collected)
    finished: threading.Event = field(default_factory=threading.Event)
    status: str = "ok"
    error: str | None = None
    record: object = None              # the RunRecord, once finished
    view_error: str | None = None      # on_update raised: the view stopped, the job went on
    history: dict = field(default_factory=dict)  # its processes' state changes during the job
    beam_states: dict[int, BeamState] = field(default_factory=dict)  # a beam sequence's beams as the verifier
                                       # last reported them, by index in the job: a new verifier goes on from them

    def process_names(self) -> dict[str, str]:
        """The job's names for its processes (draft-0 is its first worker) -> their names in the engine."""
        return {"verifier": "verifier", **{f"draft-{i}": f"draft-{w}" for i, w in enumerate(self.workers)}}

    def table_states(self, table) -> dict[str, str]:
        """Its processes' states in the engine's process table, by its own names."""
        return {name: table.by_name(pool).state.value for name, pool in self.process_names().items()}

    def show(self, states: dict[str, str]) -> None:
        """Its live view: its processes' states (by its own names), then its callback; a callback that raises
        is dropped (a broken view must not stop the engine)."""
        self.collected.states = states
        if not self.on_update:
            return
        try:
            self.on_update(self.collected)
        except BaseException as exc:  # SystemExit too: a view must never take the engine's thread down
            self.on_update = None
            self.view_error = f"{type(exc).__name__}: {exc}"

    def __post_init__(self) -> None:
        self.collected.started = self.submitted

    @property
    def n(self) -> int:
        return len(self.prompts)

    @property
    def speculative(self) -> bool:
        return self.config.mode in (Mode.SD, Mode.SEED, Mode.DSBD)

    @property
    def workers_needed(self) -> int:
        return self.config.draft_workers

    def owns(self, seq: int) -> bool:
        return self.first_seq <= seq < self.first_seq + self.n

    def local_worker(self, worker: int) -> int:
        return self.workers.index(worker)

    def owner(self, local_seq: int) -> int:
        """The pool worker whose drafts alone may extend this sequence (-1: target only)."""
        return self.workers[worker_of(self.config, local_seq)] if self.speculative else -1

    # -- what the processes report, in the job's own ids --------------------------------------------
    def commit(self, seq: int, tokens: list[int], done: bool, beams: BeamState | None = None) -> None:
        local = seq - self.first_seq
        self.collected.tokens.setdefault(local, []).extend(tokens)
        self.collected.commits.append((time.monotonic(), local, len(tokens)))
        if done:
            self.collected.done.add(local)
        if beams is not None:
            self.beam_states[local] = beams

    def reread(self, local_seq: int) -> int:
        """Tokens a new target cache reads to go on with the sequence: its context, or every beam's."""
        tokens, prompt = self.collected.tokens.get(local_seq, []), len(self.prompts[local_seq])
        state = self.beam_states.get(local_seq)
        return prompt + len(tokens) if state is None else sum(prompt + len(b) for b in state.beams(tokens))

    def mark(self, worker: int, kind: str) -> None:
        """A pool worker forks into one of the job's beam slots, exits it or is restarted (-1: the verifier
        is): a mark on its row (live view, traces), in the job's worker ids."""
        self.collected.marks.append((time.monotonic(), worker if worker < 0 else self.local_worker(worker), kind))

    def event(self, e: Event) -> None:
        """An event of this job's: ids translated; the verifier's shared events (idle, a batch across
        jobs) are clipped to the job's life so an earlier idle stretch never widens its window."""
        seq = e.seq - self.first_seq if e.seq >= 0 else -1
        worker = self.local_worker(e.worker) if e.role == "draft" else e.worker
        start = max(e.start, self.admitted or self.submitted)
        if e.end > start:
            self.collected.events.append(Event(e.pid, e.role, worker, e.kind, start, e.end, seq, self.id, e.admitted))

    def job_message(self, threads: int, elastic: bool = True) -> dict:
        """The verifier's ``job`` message: settings, its threads (elastic: they follow the drafting workers,
        scheduler/cores.py), and each sequence with its owner."""
        deadline = None if self.meta.deadline_s is None else self.submitted + self.meta.deadline_s
        return {"job": self.id, "config": self.config.to_dict(), "threads": threads, "elastic": elastic,
                "arrival": self.submitted, "priority": self.meta.priority, "deadline": deadline,
                "sequences": [[self.first_seq + i, i, self.owner(i), p] for i, p in enumerate(self.prompts)],
                "beam_workers": [self.beam_workers(i) for i in range(self.n)],
                # what is committed so far: empty at first, all of it when re-announced to a restarted verifier,
                # with where each beam sequence's beams stood
                "generated": [self.collected.tokens.get(i, []) for i in range(self.n)],
                "done": [i in self.collected.done for i in range(self.n)],
                "beam_states": [s and s.to_dict() for s in map(self.beam_states.get, range(self.n))]}

    def beam_workers(self, local_seq: int) -> list[int]:
        """dsbd: the pool workers of a sequence's beams, slot by slot (empty in other modes)."""
        if self.config.mode != Mode.DSBD:
            return []
        first = worker_of(self.config, local_seq)
        return self.workers[first:first + self.config.beam.slots_at_start]

    def assignments(self) -> list[tuple[int, list]]:
        """(pool worker, its sequences) for each of the job's workers."""
        out: dict[int, list] = {}
        for i, p in enumerate(self.prompts):
            for slot, worker in enumerate(self.beam_workers(i) or [self.owner(i)]):
                out.setdefault(worker, []).append([self.first_seq + i, i, p, slot])
        return list(out.items()) if self.speculative else []

    @property
    def complete(self) -> bool:
        """The verifier closed the job and every worker has reported its last events."""
        return self.collected.verifier_finished and self.idle >= set(self.workers)


class LiveJobs:
    """The jobs the engine holds, from submission until they end, shared by the dispatcher's parts.

    Owns ``jobs`` (not finished, in submission order: admission goes by it), ``by_seq`` (an engine-wide
    sequence id -> its job, from its announcement to its end: commits and events name sequences) and
    ``wants`` (dsbd: (job, sequence, beam slot, the round it was asked for in) waiting for a worker; the
    verifier asks, a new verifier's beams ask again, admission hands each one a parked worker)."""

    def __init__(self) -> None:
        self.jobs: list[JobRun] = []
        self.by_seq: dict[int, JobRun] = {}
        self.wants: list[tuple[JobRun, int, int, int]] = []

    def __iter__(self):
        return iter(self.jobs)

    def __contains__(self, job: JobRun) -> bool:
        return job in self.jobs

    def find(self, job_id: int) -> JobRun | None:
        return next((j for j in self.jobs if j.id == job_id), None)

    def running(self) -> list[JobRun]:
        return [j for j in self.jobs if j.phase is Phase.RUNNING]

    def announce(self, job: JobRun) -> None:
        """Its sequences are the verifier's now: their commits and events are the job's."""
        for i in range(job.n):
            self.by_seq[job.first_seq + i] = job

    def remove(self, job: JobRun) -> None:
        for i in range(job.n):
            self.by_seq.pop(job.first_seq + i, None)
        if job in self.jobs:
            self.jobs.remove(job)
