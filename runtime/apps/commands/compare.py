"""`specsched compare`: one seeded workload under several policies, side by side.

A policy decides only *when* a draft is verified; every sequence has its own random streams, so
the generated texts must be the same under every policy. The comparison checks that, and says so
loudly when it does not hold: that would be a bug in the runtime, not a property of a policy.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ...core.config import ConfigError, RunConfig
from ...engine.engine import Engine
from ..run.app import RunRecord, run
from ..view.console import print_wrote
from ..view.gantt import Gantt, legend
from ..view.monitor import Monitor
from .export import chart_svg


def policy_configs(config: RunConfig, policies: list[str]) -> list[RunConfig]:
    """One config per policy. ``priority`` without ``--priorities`` gets 0, 1, ..., n-1 (worker 0
    most urgent): with equal priorities it would only repeat FCFS."""
    if not policies:
        raise ConfigError("--policies needs at least one policy")
    if any(not name for name in policies):
        raise ConfigError(f"--policies {','.join(policies)!r} has an empty name (give P1,P2,...)")
    repeated = sorted({name for name in policies if policies.count(name) > 1})
    if repeated:
        raise ConfigError(f"--policies names {', '.join(repeated)} more than once; compare each policy once")
    configs = []
    for name in policies:
        priorities = config.priorities
        if name == "priority" and not priorities:
            priorities = list(range(config.n_sequences))
        configs.append(dataclasses.replace(config, policy=name, priorities=priorities))
    return configs


def compare(configs: list[RunConfig], console: Console | None = None) -> list[RunRecord]:
    """Each policy's job on one engine: the processes start once, the policy is swapped between jobs."""
    records: list[RunRecord] = []
    engine: Engine | None = None
    try:
        for c in configs:
            if console is not None:
                console.print(Text(f"running policy {c.policy} …", style="dim"))
            if engine is None or engine.broken:  # a verifier that died takes its engine with it
                if engine is not None:
                    engine.close()
                engine = Engine(c)
            records.append(run(c, engine=engine))
            if records[-1].status == "interrupted":  # Ctrl-C / SIGTERM: the policies not yet run are skipped
                break
    finally:
        if engine is not None:
            engine.close()
    return records


def differing_sequences(records: list[RunRecord]) -> list[int]:
    """Sequences whose tokens are not the same under every policy."""
    first = records[0].sequences
    return [s.id for s in first if any(r.sequences[s.id].tokens != s.tokens for r in records[1:])]


def comparison_table(records: list[RunRecord]) -> Table:
    table = Table(title=f"policies compared · seed {records[0].config.seed}", title_justify="left")
    table.add_column("metric")
    for r in records:
        table.add_column(Text(r.config.policy), justify="right")  # a file.py:Class name is not markup
    rows: list[tuple[str, list[str]]] = [
        ("status", [r.status for r in records]),
        ("wall time (decode)", [f"{r.metrics.wall_s:.3f} s" for r in records]),
        ("tokens/s", [f"{r.metrics.tokens_per_s:.1f}" for r in records]),
        ("acceptance rate α", [_j(r.metrics.acceptance_rate) for r in records]),
        ("verifier utilisation", [f"{100 * r.metrics.verifier_busy:.1f} %" for r in records]),
    ]
    o = [r.os_metrics for r in records]
    if all(x is not None and x.workers for x in o):
        rows += [
            ("mean turnaround", [f"{x.mean_turnaround_s:.3f} s" for x in o]),
            ("mean waiting", [f"{x.mean_waiting_s:.3f} s" for x in o]),
            ("mean response", [f"{x.mean_response_s:.3f} s" for x in o]),
            ("Jain's index, verifier time", [_j(x.jain_service) for x in o]),
            ("Jain's index, tokens", [_j(x.jain_tokens) for x in o]),
            ("longest single wait", [f"{1e3 * x.max_wait_s:.1f} ms" for x in o]),
            ("most bypasses in one wait", [f"{x.max_bypassed} (bound {x.starvation_bound})" for x in o]),
            ("starvation", ["YES" if x.starved else "no" for x in o]),
        ]
    for name, cells in rows:
        table.add_row(name, *cells)
    return table


def print_comparison(records: list[RunRecord], console: Console, *,
                     svg_dir: str | Path | None = None) -> bool:
    """Table, one compact Gantt per policy, the identical-texts verdict. True if the texts agree, or may
    differ by design (RunConfig.why_text_varies)."""
    console.print(comparison_table(records))
    for r in records:
        monitor = Monitor(r.config)
        monitor.feed(r.collected)
        snapshot = monitor.snapshot(r.collected, r.collected.finished, final=True)
        console.print(Text(f"policy {r.config.policy}", style="bold cyan"))
        console.print(Gantt(snapshot, legend=False, max_rows=9))
    console.print(legend())
    if svg_dir is not None:
        out = Path(svg_dir)
        out.mkdir(parents=True, exist_ok=True)
        for r in records:
            path = out / f"gantt-{re.sub(r'[^A-Za-z0-9_.-]+', '_', r.config.policy)}.svg"
            path.write_text(chart_svg(r.config, r.collected, title=f"specsched · policy {r.config.policy}"))
            print_wrote(console, f"wrote {path}", style="dim")
    failed = [r for r in records if r.status != "ok"]
    if failed:
        names = ", ".join(r.config.policy for r in failed)
        console.print(Panel(Text(f"run failed under {names}: texts cannot be compared"), style="bold red"))
        for r in failed:  # the cause, one line per failed run, where `run` would put it
            print(f"specsched: error: policy {r.config.policy}: {r.error or r.status}", file=sys.stderr)
        return False
    differ = differing_sequences(records)
    names = ", ".join(r.config.policy for r in records)
    if not differ:
        console.print(Text(f"✓ generated texts are identical across {names} "
                           f"({len(records[0].sequences)} sequences)", style="bold green"))
        return True
    if why := records[0].config.why_text_varies:  # every record runs one config but for its policy
        console.print(Panel(Text(
            f"texts differ across {names} (sequences {', '.join(map(str, differ))}), as they may: {why}. Compare "
            "with --temperature 0 to check that a policy changes no text."), style="yellow"))
        return True
    console.print(Panel(Group(
        Text(f"✗ GENERATED TEXTS DIFFER ACROSS POLICIES ({names})", style="bold"),
        Text(f"sequences {', '.join(map(str, differ))} differ. A policy must only change when a draft "
             "is verified, never what is generated: this is a losslessness bug.")), style="bold red"))
    return False


def _j(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
