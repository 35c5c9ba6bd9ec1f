"""`specsched teach`: a scheduling exercise, or a recorded run as one; --solve reveals the answer."""

from __future__ import annotations

from .teach import EXERCISES


def add_teach_parser(sub) -> None:
    p = sub.add_parser("teach", help="a scheduling exercise (seeded, or from a recorded run); --solve reveals the "
                                     "answer")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="which random exercise (default 0)")
    p.add_argument("--exercise", choices=sorted(EXERCISES), default=None, help="a named, fixed exercise")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="jobs in a random exercise (2..8, default 3)")
    p.add_argument("--arrivals", default=None, metavar="poisson:RATE",
                   help="a random exercise's jobs arrive as a Poisson process of RATE jobs/s (default: uniformly "
                        "over the first 30 ms)")
    p.add_argument("--trace", default=None, metavar="TRACE",
                   help="predict, then reveal, from a real run: a `specsched run --trace` file of a --mode seed "
                        "run (or workload); --policy names the policy asked about")
    p.add_argument("--batch-cost", default=None, metavar="RUN.json",
                   help="with --trace: price a batch's rows beyond one in the answer by this run's live cost fit, "
                        "as `whatif --batch-cost` does (a run under batch on the same machine)")
    p.add_argument("--policy", default=None, help="the policy asked about (default: fcfs, or the exercise's)")
    p.add_argument("--solve", action="store_true", help="reveal the schedule and each job's metrics")
    p.set_defaults(func=".analysis.teach_commands:cmd_teach")
