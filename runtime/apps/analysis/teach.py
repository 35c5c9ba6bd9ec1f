"""Scheduling exercises with answers, like OSTEP's `scheduler.py -c`: the workloads.

An exercise is a seeded workload of speculative jobs - each a draft worker with its arrival, how many rounds it
drafts, how long a round's draft takes, how many tokens each verdict commits, its priority and tickets; every
verification takes ``VERIFY_S`` - asked about under a policy; the answer comes from the what-if simulator
(whatif.py), with the same policy classes a live run uses, so exercises need no models. Named exercises are
fixed workloads for the classic lessons; random ones draw their jobs from a seed, arriving uniformly over the
first 30 ms or, with ``--arrivals poisson:RATE``, as a Poisson process (OSTEP's jobs arriving over time).
teach_commands.py asks and answers; trace_exercise.py makes an exercise of a recorded run.
"""

from __future__ import annotations

import numpy as np

from ...core.config import ConfigError, RunConfig
from ..commands.workload import poisson_rate
from .recorded_run import JobFacts, Recorded, Round

VERIFY_S = 0.010

Job = tuple[int, int, int, int, int, int]  # (arrival ms, rounds, draft ms a round, tokens a round, priority, tickets)

# name -> (policy, lesson, jobs)
EXERCISES: dict[str, tuple[str, str, list[Job]]] = {
    "convoy": ("fcfs", "FCFS convoy: a long job that drafts fast keeps its place ahead of short ones "
               "(then try sjf)", [(0, 6, 1, 4, 0, 100), (3, 1, 8, 4, 0, 100), (5, 1, 8, 4, 0, 100)]),
    "starvation": ("priority", "priority starves the least urgent job while urgent ones keep drafting "
                   "(then try stride)", [(0, 3, 2, 2, 2, 100), (0, 4, 1, 2, 0, 300), (0, 4, 1, 2, 1, 300)]),
    "low-alpha": ("fcfs", "a worker whose drafts are rarely accepted (1 token a round) needs many rounds, "
                  "and everyone waits for its verifications", [(0, 2, 4, 5, 0, 100), (0, 10, 1, 1, 0, 100),
                                                               (0, 2, 4, 5, 0, 100)]),
    "arrivals": ("fcfs", "jobs arriving while a long one runs: FCFS serves them in turn, SJF the smallest job, "
                 "SRTF the one with the least left - the long job, nearly done, overtakes a fresh one (then try "
                 "sjf and srtf)", [(0, 4, 1, 4, 0, 100), (25, 2, 1, 4, 0, 100), (26, 1, 1, 4, 0, 100)]),
}


def exercise(seed: int, jobs: int, arrivals: str | None = None) -> list[Job]:
    """A random workload of `jobs` jobs; `arrivals` ("poisson:RATE", jobs a second) draws their arrival times
    as a Poisson process from the first job at 0 ms, else they arrive uniformly over the first 30 ms."""
    if not 2 <= jobs <= 8:
        raise ConfigError(f"--jobs must be in 2..8, got {jobs}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    rate = poisson_rate(arrivals) if arrivals else None
    rng = np.random.default_rng(seed)
    if rate is None:
        times = np.sort(rng.integers(0, 30, jobs))
    else:  # exponential gaps of mean 1/rate seconds, in whole ms
        times = np.round(np.cumsum(np.r_[0.0, rng.exponential(1e3 / rate, jobs - 1)])).astype(int)
    return [(int(a), int(rng.integers(1, 6)), int(rng.choice([2, 5, 10, 15])), int(rng.integers(1, 5)),
             int(rng.integers(0, 3)), int(rng.choice([100, 200, 400]))) for a in times]


def workload(jobs: list[Job], policy: str) -> tuple[RunConfig, Recorded]:
    """The simulator's input: each job's rounds (its arrival before the first), on a verifier with no overhead."""
    config = RunConfig.of(backend="sim", mode="seed", workers=len(jobs), policy=policy, k=4,
                          priorities=[j[4] for j in jobs], tickets=[j[5] for j in jobs])
    rounds = {i: [Round((arrival if r == 0 else 0) / 1e3, draft / 1e3, VERIFY_S, tokens) for r in range(n)]
              for i, (arrival, n, draft, tokens, _, _) in enumerate(jobs)}
    return config, Recorded(rounds, jobs={i: JobFacts(budget=j[1] * j[3]) for i, j in enumerate(jobs)})
