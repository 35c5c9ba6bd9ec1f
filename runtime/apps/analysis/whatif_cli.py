"""`specsched whatif TRACE --policy P [--policy Q ...]`: a recorded run re-simulated under other policies."""

from __future__ import annotations


def add_whatif_parser(sub) -> None:
    p = sub.add_parser("whatif", help="re-simulate a recorded run (--trace) under other policies")
    p.add_argument("path", metavar="TRACE", help="a `specsched run --trace` file of a --mode seed run")
    p.add_argument("--policy", action="append", dest="policies", default=[], metavar="NAME",
                   help="repeatable: a policy to re-simulate under (built-in name, file.py:Class, module:Class)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="drafts one forward may verify (0 = all); default as `run` sets it: all under batch and "
                        "goodput, else the recorded run's")
    p.add_argument("--svg", default=None, metavar="DIR", help="write each predicted schedule's Gantt chart here")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write the table as JSON: the recorded run's and each prediction's makespan and OS metrics")
    p.set_defaults(func=".analysis.whatif_commands:cmd_whatif")
