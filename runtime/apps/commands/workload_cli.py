"""`run` and `compare` with jobs arriving over time (`--workload FILE.jsonl`, `--arrivals poisson:RATE`).

`run` plays the workload under its policy and prints each job's response, turnaround and waiting from
its arrival; `compare` plays it once per policy on one engine and puts those side by side, checking that
every job's text is the same under every policy.
"""

from __future__ import annotations

import argparse

from ...core.config import ConfigError
from ..run.flags import Flags
from ..tot.tot_cli import tree_flags_given

JOBS = 8  # --arrivals draws this many jobs unless --jobs says


def add_workload_flags(p: Flags) -> None:
    p.add_argument("--workload", default=None, metavar="FILE.jsonl",
                   help="jobs arriving over time, one JSON object a line: arrival, prompt(s), priority, "
                        "deadline, max_new_tokens")
    p.add_argument("--arrivals", default=None, metavar="poisson:RATE",
                   help="draw --jobs jobs arriving as a Poisson process of RATE jobs/s (seeded by --seed), "
                        "prompts cycling through --prompt")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help=f"jobs drawn by --arrivals (default {JOBS})")


def wants_workload(args: argparse.Namespace) -> bool:
    if getattr(args, "jobs", None) is not None and not getattr(args, "arrivals", None):  # refused, not ignored
        raise ConfigError("--jobs applies to --arrivals (a --workload file lists its own jobs)")
    wanted = bool(getattr(args, "workload", None) or getattr(args, "arrivals", None))
    if wanted and hasattr(args, "task"):  # `run`: a workload's jobs are prompts, not a tree
        if tree := tree_flags_given(args):
            raise ConfigError(f"{tree[0]} applies to a Tree-of-Thoughts run, not to a workload's jobs")
    return wanted
