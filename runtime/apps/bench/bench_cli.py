"""`specsched bench`: argparse wiring. The runtime CLI adds it with `add_bench_parser(subparsers)`."""

from __future__ import annotations

import argparse

from ...core.config import BACKENDS, RunConfig
from ..run.flags import (
    add_branch_flags,
    add_device_flags,
    add_model_flags,
    add_sampling_flags,
    int_list,
)
from .arms import ARM_NAMES
from .sweep import AXES, AXIS_ARMS, DEFAULT_VALUES, SWEEP_ARMS
from .workload import TASKS

# --smoke: the harness end to end on the sim backend in seconds (CI), not a speed measurement.
SMOKE = {"backend": "sim", "workers": 3, "max_new_tokens": 16, "warmup": 1, "repeats": 1}
DEFAULTS = {"backend": RunConfig().backend, "workers": 3, "max_new_tokens": RunConfig().max_new_tokens,
            "warmup": 1, "repeats": 5}


def add_bench_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `bench`; it sets ``func(args, console) -> int`` (the exit status)."""
    p = subparsers.add_parser(
        "bench", help="every arm on the same workload: tokens/s, speedups, α, overhead",
        description="Serial AR, serial SD, SEED under each policy, batched target-only AR, SEED with batched "
                    "verification, Self-Draft (the target drafting for itself through branch lanes and n-gram "
                    "caches) and Hugging Face's assisted / prompt-lookup generation, on the same prompts, "
                    "seeds and sampling settings: warm-up, interleaved repeats, medians and spreads, speedups "
                    "over serial AR from the same run, greedy outputs checked against serial AR.")
    p.add_argument("--smoke", action="store_true",
                   help="check the harness end to end: sim backend, tiny workload, 1 warm-up, 1 repeat")
    p.add_argument("--arms", default=None, metavar="A,B,...",
                   help=f"arms to measure (default: all, or {SWEEP_ARMS} in a sweep, "
                        + ", ".join(f"{v} in --sweep {a}" for a, v in AXIS_ARMS.items())
                        + f"; ar is always added): {', '.join(ARM_NAMES)}")
    p.add_argument("--repeats", type=int, default=None, metavar="R",
                   help=f"measured runs per arm (default {DEFAULTS['repeats']})")
    p.add_argument("--warmup", type=int, default=None, metavar="W",
                   help="discarded runs per arm first (default 1)")
    p.add_argument("--workers", "--thoughts", dest="workers", type=int, default=None, metavar="N",
                   help="thoughts n = draft workers = sequences (default 3)")
    p.add_argument("--k", type=int, default=RunConfig().shape.k, help="draft tokens per round")
    p.add_argument("--lookup", type=int, default=None, metavar="N",
                   help="n-gram lookup before the draft model in the speculative arms (default: 4 on hf, off on "
                        "sim; 0 = off, e.g. to compare the draft model alone with hf-assisted)")

    p.add_argument("--k-config", type=int_list, default=[], metavar="W1,W2,...", help="draft tree shape")
    add_branch_flags(p)  # the Self-Draft arms' lanes and corpus cache, as `run` takes them
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (outputs checked)")
    add_sampling_flags(p)
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="M",
                   help=f"tokens per sequence (default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--prompts", type=int, default=None, metavar="N",
                   help="held-out prompts: 1 (shared by every thought) or n (default: one per thought)")
    p.add_argument("--task", default=None, choices=list(TASKS), help="hf: prompts of one ToT task only")
    p.add_argument("--sweep", default=None, choices=list(AXES),
                   help="vary one axis, baselines at every point; branches: Self-Draft's lanes N and their length "
                        "L (--plots draws tokens per target forward and speedup vs L, a line per N)")
    p.add_argument("--values", default=None, metavar="V1,V2,...",
                   help="the sweep's values; tree shapes and N:L pairs separated by ';', N1,N2:L1,L2 = every pair "
                        "(defaults: "
                        + "; ".join(f"{a}: {v}" for a, v in DEFAULT_VALUES.items()) + ")")
    p.add_argument("--backend", default=None, help=f"one of {', '.join(BACKENDS)} (default {DEFAULTS['backend']})")
    add_model_flags(p)
    add_device_flags(p)
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="torch threads of every arm's target (verifier, HF peers); 0 = all cores for the "
                        "target-only arms and the peers, the cores the draft workers leave for SEED")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results machine-readably")
    p.add_argument("--plots", default=None, metavar="DIR",
                   help="write SVG plots (speedup vs α, vs the sweep axis; branches_sweep.svg for --sweep branches)")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the tables as markdown")
    p.set_defaults(func=".bench.bench_commands:cmd_bench")
    return p
