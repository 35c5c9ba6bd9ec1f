"""Jobs arriving over time: a workload file or a seeded Poisson process, played against an engine.

With every sequence starting at once, FCFS, priority and round-robin differ only in tie-breaks; with
jobs arriving while others run, the policy decides who waits. A workload is a list of jobs, each with an
arrival time (seconds after the start), its prompt(s), a priority (lower = more urgent), and optionally a
deadline (seconds after its arrival) and its own token budget:

    {"arrival": 0.0, "prompt": "Name three colours.", "priority": 1}
    {"arrival": 0.4, "prompts": ["a", "b"], "priority": 0, "deadline": 2.0, "max_new_tokens": 16}

`--arrivals poisson:RATE --jobs N` draws N jobs with exponential gaps of mean 1/RATE seconds (seeded by
--seed), cycling through the run's prompts. Job i decodes with seed --seed + i whatever the policy, so the
texts are the same under every policy; only the times differ.

Per job, the OSTEP measures, taken from its arrival: response = its first verification - arrival,
turnaround = its last token - arrival, waiting = time its drafts spent in the run queue plus time it
waited to be admitted (workers loading, or jobs of another policy running).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.config import ConfigError, RunConfig
from ...core.config_checks import MAX_NEW_TOKENS, check_priority, is_int, is_number, not_utf8
from ...engine.collected import Interrupted
from ...engine.engine import Job
from ...engine.job_checks import check_deadline
from ...engine.record import RunRecord
from ...engine.stopping import stopped_by
from ..view.traffic import LOOK_S

KEYS = {"arrival", "prompt", "prompts", "priority", "deadline", "max_new_tokens", "name"}
MAX_ARRIVAL_S = 86_400  # a workload is played in real time: an arrival a day away is a typo
MAX_JOBS = 10_000       # --jobs: every job is a record kept in memory and a row in the table


@dataclass(slots=True)
class WorkloadJob:
    arrival: float                     # seconds after the workload starts
    prompts: list[str]
    priority: int = 0
    deadline: float | None = None      # seconds after its arrival
    max_new_tokens: int | None = None
    name: str = ""


def load_workload(path: str | Path) -> list[WorkloadJob]:
    """A JSONL workload; anything off is one line naming the file and the line (ConfigError)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"--workload {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--workload {path}: not a text file (one JSON object a line)") from None
    jobs = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            jobs.append(_job(line, f"--workload {path}, line {n}", len(jobs)))
    if not jobs:
        raise ConfigError(f"--workload {path}: no jobs in it")
    return sorted(jobs, key=lambda j: j.arrival)


def _job(line: str, where: str, index: int) -> WorkloadJob:
    try:
        d = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"{where}: not JSON ({exc})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: a job is a JSON object")
    unknown = sorted(set(d) - KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})")
    if "prompt" in d and "prompts" in d:
        raise ConfigError(f"{where}: give \"prompt\" or \"prompts\", not both")
    prompts = d.get("prompts", [d["prompt"]] if "prompt" in d else None)
    if not (isinstance(prompts, list) and prompts and all(isinstance(p, str) and p.strip() for p in prompts)):
        raise ConfigError(f"{where}: give a non-empty \"prompt\" or a list of them as \"prompts\"")
    if why := next(filter(None, map(not_utf8, prompts)), None):
        raise ConfigError(f"{where}: a prompt {why}")
    arrival, deadline, budget = d.get("arrival", 0.0), d.get("deadline"), d.get("max_new_tokens")
    if not (is_number(arrival) and 0 <= arrival <= MAX_ARRIVAL_S):
        raise ConfigError(f"{where}: \"arrival\" must be seconds in [0, {MAX_ARRIVAL_S}], got {arrival!r}")
    check_deadline(f'{where}: "deadline"', deadline)
    if budget is not None and not (is_int(budget) and 1 <= budget <= MAX_NEW_TOKENS):
        raise ConfigError(f"{where}: \"max_new_tokens\" must be an integer in 1..{MAX_NEW_TOKENS:,}, got {budget!r}")
    check_priority(f'{where}: "priority"', d.get("priority", 0))
    return WorkloadJob(float(arrival), prompts, d.get("priority", 0), deadline, budget, str(d.get("name", "")) or
                       f"job {index}")


def poisson_rate(spec: str) -> float:
    """RATE of `--arrivals poisson:RATE`, jobs per second; anything else is one line."""
    kind, _, rate_text = spec.partition(":")
    try:
        rate = float(rate_text)
    except ValueError:
        rate = float("nan")
    if kind != "poisson" or not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--arrivals {spec!r}: give poisson:RATE with RATE > 0 jobs per second")
    return rate


def poisson_workload(spec: str, jobs: int, prompts: list[str], seed: int) -> list[WorkloadJob]:
    """`poisson:RATE`: `jobs` arrivals with exponential gaps of mean 1/RATE s, priorities 0-2, seeded."""
    rate = poisson_rate(spec)
    if not 1 <= jobs <= MAX_JOBS:
        raise ConfigError(f"--jobs must be in 1..{MAX_JOBS:,}, got {jobs}")
    rng, t, out = random.Random(seed), 0.0, []
    for i in range(jobs):
        out.append(WorkloadJob(round(t, 6), [prompts[i % len(prompts)]], rng.randrange(3), name=f"job {i}"))
        t += rng.expovariate(rate)
    if out[-1].arrival > MAX_ARRIVAL_S:  # the bound a workload file's arrivals have
        raise ConfigError(f"--arrivals {spec!r} --jobs {jobs}: the last job would arrive after "
                          f"{out[-1].arrival:,.0f} s, more than a day ({MAX_ARRIVAL_S:,} s); give a higher RATE")
    return out


def job_config(base: RunConfig, job: WorkloadJob, index: int) -> RunConfig:
    """Job `index` of the workload: its prompt(s) (one worker per prompt), budget and its own seed."""
    changes = {"prompts": list(job.prompts), "workers": len(job.prompts) if len(job.prompts) > 1 else
               (base.workers or 1), "seed": base.seed + index}
    if job.max_new_tokens is not None:
        changes["max_new_tokens"] = job.max_new_tokens
    if base.priorities:  # compare's per-worker default for `priority` (the CLI refuses --priorities here):
        changes["priorities"] = []  # they mean nothing across jobs that share workers; the job's own rule
    return base.replace(**changes)


@dataclass(slots=True)
class Played:
    """A workload played under one policy: the records of the jobs that arrived, in workload order."""

    records: list[RunRecord]
    stopped_by: str | None = None    # "SIGINT" / "SIGTERM": a signal ended the play (records may all be "ok")
    reason: str = ""                 # "interrupted (Ctrl-C)", for the one line the command prints


def play(engine, base: RunConfig, jobs: list[WorkloadJob], *, watch: Callable[[Job, RunConfig], None] | None = None,
         tick: Callable[[], None] | None = None) -> Played:
    """Submit each job at its arrival time (relative to now) and wait for all. `watch(job, config)` is told each
    job as it is submitted and `tick()` called every LOOK_S while the play waits (the live view, traffic.py).

    Ctrl-C or SIGTERM meanwhile, whether jobs are running or the play waits for the next arrival, closes the
    engine: the jobs that had arrived end, those unfinished interrupted with every token they verified
    (their records name the signal), and the ones still to arrive are left out."""
    start = time.monotonic()
    handles = []
    step = LOOK_S if tick else float("inf")
    try:
        for i, job in enumerate(jobs):
            while (delay := start + job.arrival - time.monotonic()) > 0:
                if tick:
                    tick()
                time.sleep(min(delay, step))
            config = job_config(base, job, i)
            handles.append(engine.submit(config=config, priority=job.priority, deadline_s=job.deadline, name=job.name))
            if watch:
                watch(handles[-1], config)
        while tick and not all(h.done() for h in handles):
            tick()
            time.sleep(LOOK_S)
        return Played([h.result() for h in handles])
    except (KeyboardInterrupt, Interrupted) as exc:
        signal_name, reason = stopped_by(exc)
    engine.close(reason)
    records = [h.result() for h in handles]
    for record in records:
        if record.status == "interrupted":
            record.stopped_by = signal_name
    return Played(records, signal_name, reason)


@dataclass(slots=True)
class JobMetrics:
    name: str
    arrival_s: float           # after the first job's arrival
    priority: int
    tokens: int
    response_s: float | None
    turnaround_s: float
    waiting_s: float
    deadline_met: bool | None


def job_metrics(records: list[RunRecord]) -> list[JobMetrics]:
    """Each job's OSTEP measures from its own arrival (the record's `collected.started`)."""
    t0 = min((r.collected.started for r in records), default=0.0)
    out = []
    for r in records:
        c, e = r.collected, r.extra.get("engine", {})
        arrival = c.started
        verifies = [ev.start for ev in c.events if ev.role == "verifier" and ev.kind == "verify"]
        last = max([t for t, _, _ in c.commits] or [c.finished])
        queued = sum(ev.duration for ev in c.events if ev.kind == "queued")
        deadline = e.get("deadline_s")
        out.append(JobMetrics(e.get("name", ""), arrival - t0, e.get("priority", 0), r.metrics.tokens,
                              min(verifies) - arrival if verifies else None, last - arrival,
                              queued + e.get("queued_s", 0.0),
                              None if deadline is None else last - arrival <= deadline))
    return out
