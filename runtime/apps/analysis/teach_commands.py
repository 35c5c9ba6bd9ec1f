"""`specsched teach`: the question, and with --solve the answer (teach_cli.py: its parser; teach.py: the
exercises; trace_exercise.py: a recorded run as one)."""

from __future__ import annotations

import argparse
import string

from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError
from ...engine.osmetrics import OsMetrics
from .recorded_run import read_batch_cost, unpriced_rows
from .teach import EXERCISES, VERIFY_S, exercise, workload
from .trace_exercise import trace_exercise
from .whatif import Prediction, simulate

SHOWN = 48  # verifications an order lists before it says how many more


def cmd_teach(args: argparse.Namespace, console: Console) -> int:
    if args.trace:
        return _from_trace(args, console)
    if args.batch_cost:
        raise ConfigError("--batch-cost prices the batches of a recorded run's answer: give it with --trace TRACE")
    random_only = [flag for flag, value in (("--seed", args.seed), ("--jobs", args.jobs),
                                            ("--arrivals", args.arrivals)) if value is not None]
    if args.exercise:
        if random_only:  # refused, not ignored: a named exercise is a fixed workload
            raise ConfigError(f"{random_only[0]} draws a random exercise; --exercise {args.exercise} is a fixed one: "
                              "give one of them")
        policy, lesson, jobs = EXERCISES[args.exercise]
        policy = args.policy or policy
    else:
        seed = 0 if args.seed is None else args.seed
        jobs = exercise(seed, 3 if args.jobs is None else args.jobs, args.arrivals)
        policy, lesson = args.policy or "fcfs", f"random exercise, seed {seed}" + (
            f", arrivals {args.arrivals}" if args.arrivals else "")
    config, run = workload(jobs, policy)
    prediction = simulate(config, run, policy)  # validates the policy before the question is asked
    names = _names(len(jobs))
    console.print(f"[bold]Exercise[/] ({lesson}). One verifier; each job is a draft worker that drafts a round, "
                  f"queues it, and drafts the next once it is verified. A verification takes "
                  f"{1e3 * VERIFY_S:.0f} ms.", highlight=False)
    table = _table("job", "arrives at", "rounds", "draft per round", "tokens per round", "priority", "tickets")
    for i, (arrival, n, draft, tokens, priority, tickets) in enumerate(jobs):
        table.add_row(names[i], f"{arrival} ms", str(n), f"{draft} ms", str(tokens), str(priority), str(tickets))
    console.print(table)
    _question(console, policy, args.solve)
    if args.solve:
        _answer(console, "Answer", names, prediction, prediction.makespan_s)
    return 0


def _from_trace(args: argparse.Namespace, console: Console) -> int:
    """Predict, then reveal: the recorded run as an exercise, what its policy did, and the question for --policy."""
    given = [flag for flag, value in (("--exercise", args.exercise), ("--seed", args.seed), ("--jobs", args.jobs),
                                      ("--arrivals", args.arrivals)) if value is not None]
    if given:
        raise ConfigError(f"{given[0]} makes an exercise; --trace makes one of a recorded run: give one of them")
    batch_cost = read_batch_cost(args.batch_cost) if args.batch_cost else None
    ex = trace_exercise(args.trace, batch_cost)
    if not args.policy:
        raise ConfigError(f"name the policy to ask about: --policy P (the run was recorded under {ex.policy})")
    prediction = simulate(ex.config, ex.run, args.policy)  # validates the policy before the question is asked
    names = _names(len(ex.jobs))
    console.print(f"[bold]A recorded run[/] ({args.trace}, policy {ex.policy}, backend {ex.config.backend}). One "
                  "verifier; each job is a draft worker that drafts a round, queues it, and drafts the next once "
                  "it is verified; the times are what the run measured.", highlight=False)
    table = _table("job", "first draft queued", "rounds", "draft per round", "verification", "tokens per round",
                   "priority", "tickets")
    for name, j in zip(names, ex.jobs):
        table.add_row(name, f"{j.arrival_ms:.0f} ms", str(j.rounds), f"{j.draft_ms:.1f} ms", f"{j.verify_ms:.1f} ms",
                      f"{j.tokens:.1f}", str(j.priority), str(j.tickets))
    console.print(table)
    _answer(console, f"Under {ex.policy}, as recorded", names, Prediction(ex.policy, ex.events, ex.os.window_s, ex.os),
            ex.os.window_s)
    _question(console, args.policy, args.solve)
    if notice := unpriced_rows([args.policy], ex.run.cost, batch_cost):
        console.print(notice, highlight=False)
    if args.solve:
        _answer(console, f"Answer (whatif's prediction from this trace, {args.policy})", names, prediction,
                prediction.makespan_s)
    return 0


def _question(console: Console, policy: str, solve: bool) -> None:
    console.print(f"[bold]Question[/]: under [bold]{policy}[/], in which order does the verifier serve the "
                  "drafts, and what is each job's response time (its first verification's start minus its "
                  "first draft's arrival in the queue) and turnaround (its last verification's end minus its "
                  "arrival)?", highlight=False)
    if not solve:
        console.print("Run again with --solve for the answer.", highlight=False)


def _answer(console: Console, title: str, names: list[str], p: Prediction, makespan: float) -> None:
    """The order of verifications (a batch: its jobs joined by +) and each job's metrics, with their means."""
    turns: dict[float, list[int]] = {}
    for e in sorted(p.events, key=lambda e: (e.start, e.seq)):
        if e.role == "draft" and e.kind == "verify":
            turns.setdefault(e.start, []).append(e.seq)
    order = ["+".join(names[s] for s in seqs) for seqs in turns.values()]
    more = f" … and {len(order) - SHOWN} more" if len(order) > SHOWN else ""
    console.print(f"[bold]{title}[/]: served in the order {' '.join(order[:SHOWN])}{more}; everything done at "
                  f"{1e3 * makespan:.0f} ms.", highlight=False)
    console.print(_metrics(names, p.os))


def _metrics(names: list[str], o: OsMetrics) -> Table:
    table = _table("job", "response", "turnaround", "waiting")
    for w in o.workers:
        table.add_row(names[w.worker], f"{1e3 * w.response_s:.0f} ms", f"{1e3 * w.turnaround_s:.0f} ms",
                      f"{1e3 * w.waiting_s:.0f} ms")
    table.add_row("mean", f"{1e3 * o.mean_response_s:.1f} ms", f"{1e3 * o.mean_turnaround_s:.1f} ms",
                  f"{1e3 * o.mean_waiting_s:.1f} ms")
    return table


def _table(*columns: str) -> Table:
    table = Table(show_header=True)
    for column in columns:
        table.add_column(column, justify="right")
    return table


def _names(n: int) -> list[str]:
    """A, B, C, ... as OSTEP names jobs; w0, w1, ... beyond 26."""
    return list(string.ascii_uppercase[:n]) if n <= 26 else [f"w{i}" for i in range(n)]
