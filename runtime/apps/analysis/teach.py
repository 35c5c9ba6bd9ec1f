"""`specsched teach`: scheduling exercises with answers, like OSTEP's `scheduler.py -c`.

An exercise is a seeded workload of speculative jobs - each a draft worker with its arrival, how
many rounds it drafts, how long a round's draft and its verification take, how many tokens each
verdict commits, its priority and tickets - and a question: under policy P, in which order does the
verifier serve the drafts, and what are each job's response and turnaround times? `--solve` reveals
the answer from the what-if simulator (whatif.py), with the same policy classes a live run uses, so
exercises need no models. Named exercises (`--exercise`) are fixed workloads for the classic lessons.
"""

from __future__ import annotations

import argparse
import string

import numpy as np
from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError, RunConfig
from .recorded_run import JobFacts, Recorded, Round
from .whatif import simulate

VERIFY_S = 0.010

# name -> (policy, lesson, jobs as (arrival ms, rounds, draft ms, tokens per round, priority, tickets))
EXERCISES: dict[str, tuple[str, str, list[tuple[int, int, int, int, int, int]]]] = {
    "convoy": ("fcfs", "FCFS convoy: a long job that drafts fast keeps its place ahead of short ones "
               "(then try sjf)", [(0, 6, 1, 4, 0, 100), (3, 1, 8, 4, 0, 100), (5, 1, 8, 4, 0, 100)]),
    "starvation": ("priority", "priority starves the least urgent job while urgent ones keep drafting "
                   "(then try stride)", [(0, 3, 2, 2, 2, 100), (0, 4, 1, 2, 0, 300), (0, 4, 1, 2, 1, 300)]),
    "low-alpha": ("fcfs", "a worker whose drafts are rarely accepted (1 token a round) needs many rounds, "
                  "and everyone waits for its verifications", [(0, 2, 4, 5, 0, 100), (0, 10, 1, 1, 0, 100),
                                                               (0, 2, 4, 5, 0, 100)]),
}


def add_teach_parser(sub) -> None:
    p = sub.add_parser("teach", help="a scheduling exercise (seeded); --solve reveals the answer")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="which random exercise (default 0)")
    p.add_argument("--exercise", choices=sorted(EXERCISES), default=None, help="a named, fixed exercise")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="jobs in a random exercise (2..8, default 3)")
    p.add_argument("--policy", default=None, help="the policy asked about (default: fcfs, or the exercise's)")
    p.add_argument("--solve", action="store_true", help="reveal the schedule and each job's metrics")
    p.set_defaults(func=cmd_teach)


def exercise(seed: int, jobs: int) -> list[tuple[int, int, int, int, int, int]]:
    """A random workload: (arrival ms, rounds, draft ms a round, tokens a round, priority, tickets) per job."""
    if not 2 <= jobs <= 8:
        raise ConfigError(f"--jobs must be in 2..8, got {jobs}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.integers(0, 30, jobs))
    return [(int(a), int(rng.integers(1, 6)), int(rng.choice([2, 5, 10, 15])), int(rng.integers(1, 5)),
             int(rng.integers(0, 3)), int(rng.choice([100, 200, 400]))) for a in arrivals]


def workload(jobs: list[tuple[int, int, int, int, int, int]], policy: str) -> tuple[RunConfig, Recorded]:
    config = RunConfig(backend="sim", mode="seed", workers=len(jobs), policy=policy, k=4,
                       priorities=[j[4] for j in jobs], tickets=[j[5] for j in jobs])
    rounds = {i: [Round((arrival if r == 0 else 0) / 1e3, draft / 1e3, VERIFY_S, tokens) for r in range(n)]
              for i, (arrival, n, draft, tokens, _, _) in enumerate(jobs)}
    return config, Recorded(rounds, jobs={i: JobFacts(budget=j[1] * j[3]) for i, j in enumerate(jobs)})


def cmd_teach(args: argparse.Namespace, console: Console) -> int:
    if args.exercise:
        random_only = [flag for flag, value in (("--seed", args.seed), ("--jobs", args.jobs)) if value is not None]
        if random_only:  # refused, not ignored: a named exercise is a fixed workload
            raise ConfigError(f"{random_only[0]} draws a random exercise; --exercise {args.exercise} is a fixed one: "
                              "give one of them")
        policy, lesson, jobs = EXERCISES[args.exercise]
        policy = args.policy or policy
    else:
        seed = 0 if args.seed is None else args.seed
        jobs, policy = exercise(seed, 3 if args.jobs is None else args.jobs), args.policy or "fcfs"
        lesson = f"random exercise, seed {seed}"
    config, run = workload(jobs, policy)
    prediction = simulate(config, run, policy)  # validates the policy before the question is asked
    names = string.ascii_uppercase
    console.print(f"[bold]Exercise[/] ({lesson}). One verifier; each job is a draft worker that drafts a round, "
                  f"queues it, and drafts the next once it is verified. A verification takes "
                  f"{1e3 * VERIFY_S:.0f} ms.", highlight=False)
    table = Table(show_header=True)
    for column in ("job", "arrives at", "rounds", "draft per round", "tokens per round", "priority", "tickets"):
        table.add_column(column, justify="right")
    for i, (arrival, n, draft, tokens, priority, tickets) in enumerate(jobs):
        table.add_row(names[i], f"{arrival} ms", str(n), f"{draft} ms", str(tokens), str(priority), str(tickets))
    console.print(table)
    console.print(f"[bold]Question[/]: under [bold]{policy}[/], in which order does the verifier serve the "
                  "drafts, and what is each job's response time (its first verification's start minus its "
                  "first draft's arrival in the queue) and turnaround (its last verification's end minus its "
                  "arrival)?", highlight=False)
    if not args.solve:
        console.print("Run again with --solve for the answer.", highlight=False)
        return 0
    order = [e.seq for e in sorted(prediction.events, key=lambda e: e.start)
             if e.role == "verifier" and e.kind == "verify"]
    console.print(f"[bold]Answer[/]: served in the order {' '.join(names[s] for s in order)}; "
                  f"everything done at {1e3 * prediction.makespan_s:.0f} ms.", highlight=False)
    answer = Table(show_header=True)
    for column in ("job", "response", "turnaround", "waiting"):
        answer.add_column(column, justify="right")
    for w in prediction.os.workers:
        answer.add_row(names[w.worker], f"{1e3 * w.response_s:.0f} ms", f"{1e3 * w.turnaround_s:.0f} ms",
                       f"{1e3 * w.waiting_s:.0f} ms")
    o = prediction.os
    answer.add_row("mean", f"{1e3 * o.mean_response_s:.1f} ms", f"{1e3 * o.mean_turnaround_s:.1f} ms",
                   f"{1e3 * o.mean_waiting_s:.1f} ms")
    console.print(answer)
    return 0
