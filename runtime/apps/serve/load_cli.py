"""`specsched bench serve`: a load test of `specsched serve` on 127.0.0.1, once per policy, on one engine.

N streaming clients, Poisson arrivals, a bounded number of requests; per policy: requests served, lost and
duplicated, time to first token and inter-token latency at p50 and p99, tokens/s, and whether the one
client killed mid-stream left a worker busy (it must not). Greedy decoding, so each prompt's text must be
the same under every policy. A benchmark, not a test: numbers go to BENCHMARKS.md with the `--json` record.
"""

from __future__ import annotations

import argparse

from ....policies.loader import load_policy
from ...core.config import BACKENDS, ConfigError, RunConfig
from ..bench.workload import prompts
from ..run.flag_config import SIM_FLAGS, given
from ..run.flags import add_device_flags, add_model_flags, name_list
from .load import (
    MAX_CLIENTS,
    MAX_REQUESTS,
    Load,
)


def add_load_parser(sub) -> None:
    p = sub.add_parser("serve", help="load test of `specsched serve`: streaming clients, Poisson arrivals, "
                                     "per policy (127.0.0.1 only)")
    p.add_argument("--clients", type=int, default=4, metavar="N", help=f"requests in flight at most (<= {MAX_CLIENTS})")
    p.add_argument("--rate", type=float, default=2.0, metavar="R", help="arrivals per second (Poisson)")
    p.add_argument("--requests", type=int, default=16, metavar="M", help=f"requests per policy (<= {MAX_REQUESTS})")
    p.add_argument("--max-tokens", type=int, default=16, metavar="T", help="max_tokens of every request")
    p.add_argument("--policies", type=name_list, default=["fcfs", "priority", "goodput"], metavar="P1,P2,...",
                   help="the policies, one after another on the same engine")
    p.add_argument("--no-kill", action="store_true", help="no client hangs up mid-stream")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds a request may take at most")
    p.add_argument("--backend", default="sim", help=f"one of {', '.join(BACKENDS)}")
    add_model_flags(p)
    add_device_flags(p)
    for flag in SIM_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), type=float, default=None, metavar="X",
                       help=f"sim: as for `run` ({RunConfig().to_dict()[flag]:g} unless given)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="arrivals and priorities")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results machine-readably")
    p.set_defaults(func=".serve.load_commands:cmd_bench_serve")


def load_config(args: argparse.Namespace) -> tuple[RunConfig, Load]:
    sim = given(args, SIM_FLAGS)
    if "sim_vocab" in sim:
        sim["sim_vocab"] = int(sim["sim_vocab"])
    config = RunConfig.of(backend=args.backend, target=args.target, draft=args.draft, device=args.device,
                          dtype=args.dtype, max_new_tokens=args.max_tokens, temperature=0.0, seed=args.seed, **sim)
    for policy in args.policies:  # every policy loads before any model does
        load_policy(policy, config.supervision.policy_timeout_s)
    if not 0 < args.timeout <= 3600:
        raise ConfigError(f"--timeout must be seconds in (0, 3600], got {args.timeout}")
    try:
        load = Load(args.requests, args.clients, args.rate, args.max_tokens, tuple(prompts(args.backend, 4)),
                    model="bench", seed=args.seed, kill=None if args.no_kill else args.requests // 2)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config, load
