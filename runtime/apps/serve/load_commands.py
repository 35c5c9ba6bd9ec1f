"""`specsched bench serve`: the HTTP server under a load of streaming clients, policy by policy (its flags:
load_cli.py)."""

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

from ...core.config import RunConfig
from ...engine.engine import Engine
from ...engine.provenance import provenance
from ..run.flag_config import BATCHING
from .load import (
    KILLED_TOKENS,
    Load,
    Seen,
    duplicated,
    percentile,
    play,
)
from .load_cli import load_config
from .requests import Limits
from .routes import ServeApp
from .server import Server

FREED_WAIT_S = 120.0   # how long the killed client's job may take to give its workers back (generous)


def cmd_bench_serve(args: argparse.Namespace, console: Console) -> int:
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
