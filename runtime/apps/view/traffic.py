"""An engine's traffic as one run for the live view: jobs coming and going on its pool of draft processes.

`specsched serve` runs many jobs on one engine, each arriving when its request does. A job's `Collected`
speaks in the job's own ids (sequences and workers 0..n-1, engine/jobs.py); the view of the engine shows its
pool instead: one row per draft process, by its id in the pool (`draft-3`, as `ps` and the engine's process
table name it), the verifier's row naming by that id whose draft it verifies, and ``▸`` where a job begins on a
row. `Traffic` reads each watched job's new events, commits and marks at every look and files them under the
pool's ids, as a --mode seed run whose sequence i is drafted by worker i; `TrafficMonitor` is the `Monitor` of
that run, with the jobs counted in its title.

A server runs for days, so nothing here grows with its age: the monitor takes the events and commits it has
read out of the traffic, its timeline forgets what can no longer be in a window, an ended job is let go once
read, and the usage sampler keeps no series (a server's `--trace` is written from the jobs' own records).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from ...core.config import RunConfig
from ...core.events import VERIFIER
from ...engine.collected import Collected
from ...engine.engine import Engine, Job
from ...engine.record import worker_of
from .monitor import MAX_SPAN_S, Monitor, Snapshot
from .timeline import Timeline

LOOK_S = 0.1  # how often a command looks at the traffic (the view redraws at most 10 times a second)


@dataclass(slots=True)
class _Watched:
    job: Job
    config: RunConfig
    events: int = 0                                 # how many of the job's events, commits and marks are read
    commits: int = 0
    marks: int = 0
    rows: set[int] = field(default_factory=set)     # the pool workers it has begun on (marked)


class Traffic:
    """Every watched job of `engine` in the pool's ids, added to `collected` at each `look()`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.collected = Collected(started=time.monotonic())
        self._arrived: deque[_Watched] = deque()   # from the server's threads: deque appends are atomic
        self._watched: list[_Watched] = []
        self._stretches: dict[tuple, float] = {}   # the verifier's stretches filed (one shared by jobs is in each)
        self.jobs = self.sequences = self.ended_sequences = self.budget = 0
        self.drafting: set[int] = set()            # pool workers drafting for a job now
        self.mark_kinds: set[str] = {"job"}
        self._counters: Counter = Counter()        # the ended jobs' (drafted, accepted: the exact α)

    @property
    def running(self) -> int:
        return len(self._watched)

    def watch(self, job: Job, config: RunConfig) -> None:
        """Show `job`, submitted with `config` (from any thread)."""
        self._arrived.append(_Watched(job, config))

    def look(self, now: float | None = None) -> Collected:
        """What the jobs reported since the last look, and the process table as it is now."""
        now = time.monotonic() if now is None else now
        while self._arrived:
            w = self._arrived.popleft()
            self._watched.append(w)
            self.jobs += 1
            self.sequences += w.config.n_sequences
            self.budget += w.config.n_sequences * w.config.max_new_tokens
        for w in list(self._watched):
            ended = w.job.done()  # asked first: an ended job's reports are all in by then
            self._read(w)
            if ended:
                self._watched.remove(w)
                self.ended_sequences += w.config.n_sequences
                self._counters.update({k: v for k, v in w.job.collected.counters.items() if isinstance(v, int)})
        c = self.collected
        table = self.engine.processes
        c.processes = {p["name"]: p["pid"] for p in table if p["pid"] and p["state"] != "exited"}
        # a worker drafting says for which job: what the process lines of a server's view most need
        c.states = {p["name"]: f"job {p['job']}" if p["state"] == "drafting" and p["job"] is not None
                    else p["state"] for p in table}
        self.drafting = {int(p["name"].removeprefix("draft-")) for p in table
                         if p["role"] == "draft" and p["state"] == "drafting"}
        c.counters = dict(self._counters)
        c.marks = [m for m in c.marks if m[0] >= now - 2 * MAX_SPAN_S]  # older ones are in no window now
        if len(self._stretches) > 4096:
            self._stretches = {k: end for k, end in self._stretches.items() if end >= now - 2 * MAX_SPAN_S}
        return c

    def _read(self, w: _Watched) -> None:
        c, mine, workers = self.collected, w.job.collected, w.job.workers

        def pool(local_seq: int) -> int:  # the pool worker drafting a sequence of the job (-1: the target alone)
            i = worker_of(w.config, local_seq) if local_seq >= 0 else -1
            return workers[i] if 0 <= i < len(workers) else -1

        events = mine.events[w.events:]
        w.events += len(events)
        for e in events:
            if e.role == "draft":
                if e.worker >= len(workers):
                    continue
                row = workers[e.worker]
                if row not in w.rows:
                    w.rows.add(row)
                    c.marks.append((e.start, row, "job"))
                c.events.append(dataclasses.replace(e, worker=row, seq=row))
            elif (key := (e.pid, e.kind, e.end)) not in self._stretches:  # a stretch shared by jobs: once
                self._stretches[key] = e.end
                c.events.append(dataclasses.replace(e, seq=pool(e.seq)))
        commits = mine.commits[w.commits:]
        w.commits += len(commits)
        c.commits += [(t, pool(seq), n) for t, seq, n in commits]
        marks = mine.marks[w.marks:]
        w.marks += len(marks)
        for t, worker, kind in marks:
            if worker < len(workers):
                c.marks.append((t, workers[worker] if worker >= 0 else VERIFIER, kind))
                self.mark_kinds.add(kind)


class TrafficMonitor(Monitor):
    """The `Monitor` of an engine's traffic: a row per pool worker, a window however long it has run (its final
    frame too), and in the title how many jobs came and how many run."""

    def __init__(self, traffic: Traffic, config: RunConfig, usage=None, *, name: str = "serve",
                 whole: bool = False) -> None:
        """`config`: the jobs' defaults (the title's mode, policy and backend; α's estimate until a job ends).
        `whole`: keep every event and end on the whole run's chart, as a run's view does (a workload, which ends;
        a server runs for days)."""
        super().__init__(config, usage, label=name)
        self.traffic, self.name, self.whole = traffic, name, whole
        self.timeline = Timeline(0)  # rows come as the pool's processes do
        self.tokens_by_worker = {}
        self.reported: float | None = None  # the latest end of any event: the last traffic

    def feed(self, collected: Collected) -> None:
        if self.timeline.origin is None:
            self.timeline.origin = collected.started  # the axis starts with the server
        for worker in (int(name.removeprefix("draft-")) for name in collected.processes if name.startswith("draft-")):
            self.timeline.add_row(worker)
            self.tokens_by_worker.setdefault(worker, 0)
            self.timeline.waiting.setdefault(worker, 0.0)
        ends = [e.end for e in collected.events] + ([self.reported] if self.reported is not None else [])
        self.reported = max(ends, default=None)
        super().feed(collected)
        del collected.events[:], collected.commits[:]  # taken: the traffic's lists stay as long as one look
        self._events = self._commits = 0

    def _count(self, by_worker: dict[int, int], seq: int, n: int) -> None:
        if seq >= 0:  # a sequence is named by its pool worker here; the target alone's has none
            by_worker[seq] = by_worker.get(seq, 0) + n

    def _done_workers(self, collected: Collected) -> set[int]:
        """Rows with nothing in flight: the workers not drafting, the verifier once no job runs."""
        idle = {k for k in self.timeline.keys if k != VERIFIER and k not in self.traffic.drafting}
        return idle | ({VERIFIER} if not self.traffic.running else set())

    def snapshot(self, collected: Collected, now: float, *, columns: int = 80, final: bool = False) -> Snapshot:
        t, tl = self.traffic, self.timeline
        if final and self.reported is not None:  # the last frame shows the last traffic, however long ago
            tl.frontier = self.reported
        elif not t.running:  # nothing in flight: every process has reported up to now
            tl.frontier = max(tl.frontier or now, now)
        self.label = f"{self.name} · {t.jobs} jobs, {t.running} running"
        # a server's last frame is a window too: no chart of days
        s = super().snapshot(collected, now, columns=columns, final=final and self.whole)
        if self.reported is not None and not self.whole:  # kept: the minute before the last traffic, what any
            tl.forget(self.reported - MAX_SPAN_S)            # window can show of it
        kinds = tuple(k for k in ("job", "fork", "exit", "restart") if k in t.mark_kinds)
        return dataclasses.replace(s, finished=final, tokens_max=t.budget, done=t.ended_sequences,
                                   sequences=t.sequences, mark_kinds=kinds)
