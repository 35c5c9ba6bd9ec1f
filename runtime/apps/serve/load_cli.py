"""`specsched bench serve`: a load test of `specsched serve` on 127.0.0.1, once per policy, on one engine.

N streaming clients, Poisson arrivals, a bounded number of requests; per policy: requests served, lost and
duplicated, time to first token and inter-token latency at p50 and p99, tokens/s, and whether the one
client killed mid-stream left a worker busy (it must not). Greedy decoding, so each prompt's text must be
the same under every policy. A benchmark, not a test: numbers go to BENCHMARKS.md with the `--json` record.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specsched.policies.loader import load_policy
from specsched.runtime.apps.serve.load import (
    KILLED_TOKENS,
    MAX_CLIENTS,
    MAX_REQUESTS,
    Load,
    Seen,
    duplicated,
    percentile,
    play,
)
from specsched.runtime.core.config import BACKENDS, ConfigError, RunConfig
from specsched.runtime.flags import BATCHING, SIM_FLAGS, add_device_flags, add_model_flags, given, name_list

FREED_WAIT_S = 120.0   # how long the killed client's job may take to give its workers back (generous)


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
                       help=f"sim: as for `run` ({getattr(RunConfig(), flag):g} unless given)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="arrivals and priorities")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results machine-readably")
    p.set_defaults(func=cmd_bench_serve)


def load_config(args: argparse.Namespace) -> tuple[RunConfig, Load]:
    sim = given(args, SIM_FLAGS)
    if "sim_vocab" in sim:
        sim["sim_vocab"] = int(sim["sim_vocab"])
    config = RunConfig(backend=args.backend, target=args.target, draft=args.draft, device=args.device,
                       dtype=args.dtype, max_new_tokens=args.max_tokens, temperature=0.0, seed=args.seed, **sim)
    for policy in args.policies:  # every policy loads before any model does
        load_policy(policy, config.policy_timeout_s)
    if not 0 < args.timeout <= 3600:
        raise ConfigError(f"--timeout must be seconds in (0, 3600], got {args.timeout}")
    from specsched.runtime.bench.workload import prompts

    try:
        load = Load(args.requests, args.clients, args.rate, args.max_tokens, tuple(prompts(args.backend, 4)),
                    model="bench", seed=args.seed, kill=None if args.no_kill else args.requests // 2)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return config, load


def cmd_bench_serve(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.apps.serve.requests import Limits  # starlette, uvicorn: loaded by this command only
    from specsched.runtime.apps.serve.routes import ServeApp
    from specsched.runtime.apps.serve.server import Server
    from specsched.runtime.engine.engine import Engine
    from specsched.runtime.engine.provenance import provenance

    config, load = load_config(args)
    rows, texts = [], {}
    started, load_before = time.monotonic(), os.getloadavg()  # a shared machine's other work shapes the latencies
    with Engine(dataclasses.replace(config, workers=1, prompts=[load.prompts[0]])) as engine:
        engine.start_workers(min(load.clients, 16))
        for policy in args.policies:
            defaults = dataclasses.replace(config, policy=policy, max_batch=0 if policy in BATCHING else 1)
            limits = Limits(max_tokens=max(load.max_tokens, KILLED_TOKENS))
            app = ServeApp(engine, defaults, model=load.model, limits=limits)
            console.print(Text(f"· {policy}: {load.requests} requests, {load.clients} clients, {load.rate:g}/s …",
                               style="dim"), highlight=False)
            with Server(app.app) as server:
                t0 = time.monotonic()
                seen = asyncio.run(play(server.url, load, args.timeout))
                wall = time.monotonic() - t0
                busy = _busy_after(engine, app)
            rows.append(_row(policy, seen, wall, busy))
            texts[policy] = {s.index: s.text for s in seen if s.served}
    same = _same_texts(texts, load)
    console.print(_table(rows, config, load))
    console.print(Text(f"{'✓' if same else '✗'} each prompt's text is {'the same' if same else 'NOT the same'} under "
                       f"every policy (greedy)", style="green" if same else "bold red"), highlight=False)
    if args.json:
        record = {"schema": "specsched-bench-serve/1", "load": dataclasses.asdict(load), "backend": config.backend,
                  "policies": rows, "texts_identical": same, "total_s": time.monotonic() - started,
                  "load_average": {"before": load_before, "after": os.getloadavg()},
                  "provenance": provenance(config, dirty=True)}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
        console.print(Text(f"wrote {args.json}", style="dim"), highlight=False)
    bad = any(r["lost"] or r["duplicated"] or r["workers_busy_after_kill"] for r in rows)
    return 1 if bad or not same else 0


def _busy_after(engine, app) -> int:
    """Draft workers still drafting once every request has ended (after a generous wait): must be 0."""
    deadline = time.monotonic() + FREED_WAIT_S
    while time.monotonic() < deadline:
        drafting = [p for p in engine.processes if p["role"] == "draft" and p["state"] == "drafting"]
        if not drafting and not app.metrics.active:
            return 0
        time.sleep(0.05)
    return len(drafting)


def _row(policy: str, seen: list[Seen], wall: float, busy: int) -> dict:
    served = [s for s in seen if s.served]
    killed = sum(s.killed for s in seen)
    ttft = [s.ttft for s in served if s.ttft is not None]
    itl = [s.itl for s in served if s.itl is not None]
    return {"policy": policy, "requests": len(seen), "served": len(served), "killed": killed,
            "lost": len(seen) - len(served) - killed, "duplicated": duplicated(seen),
            "errors": sorted({s.error for s in seen if s.error})[:5],
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "itl_p50_s": percentile(itl, 50), "itl_p99_s": percentile(itl, 99),
            "tokens": sum(s.tokens for s in served), "wall_s": wall,
            "tokens_per_s": sum(s.tokens for s in served) / wall if wall > 0 else 0.0,
            "workers_busy_after_kill": busy}


def _same_texts(texts: dict[str, dict[int, str]], load: Load) -> bool:
    """Greedy: every served request of one prompt has one text, under every policy."""
    by_prompt: dict[str, set[str]] = {}
    for per_policy in texts.values():
        for i, text in per_policy.items():
            by_prompt.setdefault(load.prompts[i % len(load.prompts)], set()).add(text)
    return all(len(v) == 1 for v in by_prompt.values())


def _table(rows: list[dict], config: RunConfig, load: Load) -> Table:
    table = Table(title=f"bench serve · {config.backend} · {load.requests} requests · {load.clients} clients · "
                        f"{load.rate:g}/s · {load.max_tokens} tokens", title_justify="left")
    for name in ("policy", "served", "lost", "dup", "killed", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
                 "tok/s", "busy after kill"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for r in rows:
        table.add_row(r["policy"], str(r["served"]), str(r["lost"]), str(r["duplicated"]), str(r["killed"]),
                      _ms(r["ttft_p50_s"]), _ms(r["ttft_p99_s"]), _ms(r["itl_p50_s"]), _ms(r["itl_p99_s"]),
                      f"{r['tokens_per_s']:.1f}", str(r["workers_busy_after_kill"]))
    return table


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"
