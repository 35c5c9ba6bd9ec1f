"""Predict, then reveal, from a real recorded run: `specsched teach --trace TRACE --policy P [--solve]`.

A recorded --mode seed run (or workload) as an exercise: each worker a job - when its first draft reached the
run queue, its rounds, how long it drafted and its verifications took on average, the tokens a round
committed - and what the run's own policy did with them (the order it served them, each job's response and
turnaround). The question is what P would do; the answer is whatif's prediction from the same trace
(whatif.py, recorded_run.py), so the student's reasoning meets the real timings: start-up, dispatch, drafts
that take longer while every worker drafts.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ...core.config import RunConfig
from ...core.costs import CostCurve
from ...core.events import Event
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ...engine.record import worker_of
from .recorded_run import Recorded, from_trace


@dataclass(frozen=True, slots=True)
class Job:
    arrival_ms: float      # its first draft's sending, from the run's start
    rounds: int
    draft_ms: float        # mean drafting per round
    verify_ms: float       # mean verification
    tokens: float          # mean tokens a round committed
    priority: int
    tickets: int


@dataclass(slots=True)
class TraceExercise:
    config: RunConfig
    run: Recorded
    jobs: list[Job]
    events: list[Event]        # what the recorded run did, from its start
    os: OsMetrics

    @property
    def policy(self) -> str:
        return self.config.policy


def trace_exercise(path: str, batch_cost: CostCurve | None = None) -> TraceExercise:
    """The exercise a trace makes; a trace whatif cannot re-simulate is refused as whatif refuses it. `batch_cost`
    prices the rows of a batch beyond one in the answer, as `whatif --batch-cost` does (recorded_run.from_trace)."""
    data, config, events, run = from_trace(path, batch_cost)
    jobs = []
    for seq, rounds in sorted(run.rounds.items()):
        worker, job = worker_of(config, seq), run.job(seq)
        jobs.append(Job(1e3 * (rounds[0].gap_s + rounds[0].draft_s), len(rounds),
                        1e3 * statistics.fmean(r.draft_s for r in rounds),
                        1e3 * statistics.fmean(r.verify_s for r in rounds),
                        statistics.fmean(r.committed for r in rounds),
                        job.priority if run.jobs else config.priority_of(worker), config.tickets_of(worker)))
    tokens = {s["id"]: len(s["tokens"]) for s in data["sequences"]}
    return TraceExercise(config, run, jobs, events, measure_os(events, tokens))
