"""`specsched rerun RECORD`: a recorded run (or tree), run again here, and its output checked against the
record's."""

from __future__ import annotations


def add_rerun_parser(sub) -> None:
    p = sub.add_parser("rerun", help="run a recorded run or tree (`run --json`) again and check that its output "
                                     "is the record's",
                       description="Run a record again here, with the config it holds, and check its output "
                                   "against the record's, token for token (a tree: node for node); the record's "
                                   "provenance is printed beside this run's. Exit 0: the same output; 1: it parts "
                                   "(where, and what differs that could explain it); 2: not a record this can run.")
    p.add_argument("path", metavar="RECORD", help="a `specsched run --json` (or --trace) file: a run of prompts, or "
                                                  "a Tree-of-Thoughts run")
    p.add_argument("--json", default=None, metavar="PATH", help="write the rerun's record")
    p.add_argument("--trace", default=None, metavar="PATH", help="record the rerun for `specsched replay`")
    p.add_argument("--no-live", action="store_true",
                   help="no live view (on a terminal) and no progress lines (elsewhere)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=".analysis.rerun_commands:cmd_rerun")
