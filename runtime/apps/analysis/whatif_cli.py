"""`specsched whatif TRACE [TRACE ...] --policy P [--policy Q ...]`: a recorded run re-simulated under other
policies; several recordings of one workload give the median of their predictions."""

from __future__ import annotations


def add_whatif_parser(sub) -> None:
    p = sub.add_parser("whatif", help="re-simulate a recorded run (--trace) under other policies")
    p.add_argument("paths", nargs="+", metavar="TRACE",
                   help="a `specsched run --trace` file of a --mode seed run; several recordings of one workload "
                        "(the same sequences and tokens, the same policy): each cell is then their median")
    p.add_argument("--policy", action="append", dest="policies", default=[], metavar="NAME",
                   help="repeatable: a policy to re-simulate under (built-in name, file.py:Class, module:Class)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="drafts one forward may verify (0 = all); default as `run` sets it: all under batch and "
                        "goodput, else the recorded run's")
    p.add_argument("--batch-cost", default=None, metavar="RUN.json",
                   help="what a batched forward costs, from another run's record or trace (its `cost_curve`: "
                        "a + b·tokens + c·(rows - 1), fitted live): a run that verified one draft at a time "
                        "cannot show c, so record one under batch on the same machine and pair")
    p.add_argument("--svg", default=None, metavar="DIR",
                   help="write each predicted schedule's Gantt chart here (from the first TRACE)")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write the table as JSON: the recorded run's and each prediction's makespan and OS metrics "
                        "(several traces: the medians, and each trace's own table)")
    p.set_defaults(func=".analysis.whatif_commands:cmd_whatif")
