"""`specsched replay` and `specsched export`: the commands (watch_cli.py: their parsers)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ...core.config import ConfigError
from ...engine.provenance import summary as provenance_summary
from ..bench.plot import reliability
from ..run.exits import EXIT_FAILED, finish
from ..run.trace import ReplayClock, load_events, load_trace, replay
from ..view.console import print_wrote
from ..view.dashboard import Dashboard
from ..view.live import choose_view
from ..view.monitor import Monitor
from ..view.usage import RecordedUsage
from .export import final_svg, write_chrome
from .watch_cli import MAX_WIDTH, MIN_WIDTH


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    trace = load_trace(args.path)
    record, collected = trace.record, trace.record.collected
    monitor = Monitor(record.config, RecordedUsage(trace.usage))
    if args.final:
        monitor.feed(collected)
        console.print(Dashboard(monitor.snapshot(collected, ReplayClock(trace).end, final=True)))
    else:
        clock = ReplayClock(trace, args.speed)
        with choose_view(console, monitor, clock=clock) as view:
            replay(trace, view.update, clock)
    code = finish(record, console, texts=False)
    console.print(provenance_summary(record.provenance), markup=False, highlight=False)
    if trace.reproduced():
        console.print("[green]✓ metrics recomputed from the trace's events equal the recorded ones[/]")
    else:
        console.print("[bold red]✗ metrics recomputed from the trace's events differ from the recorded"
                      " ones[/]")
        code = code or EXIT_FAILED
    return code


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    if not (args.chrome or args.svg or args.reliability):
        raise ConfigError("nothing to export: give --chrome OUT.json, --svg OUT.svg and/or --reliability OUT.svg")
    if not MIN_WIDTH <= args.width <= MAX_WIDTH:
        raise ConfigError(f"--width must be in [{MIN_WIDTH}, {MAX_WIDTH}] columns, got {args.width}")
    data, events = load_events(args.path)
    if args.reliability and not sum((data.get("calibration") or {}).get("proposed") or []):  # before any output
        raise ConfigError(f"{args.path}: no calibration bins (a run that drafted, recorded by this version)")
    console.print(provenance_summary(data.get("provenance")), markup=False, highlight=False)
    if args.chrome:
        write_chrome(data, events, args.chrome)
        print_wrote(console, f"wrote {args.chrome} (open it in https://ui.perfetto.dev or chrome://tracing)")
    if args.svg:
        Path(args.svg).write_text(final_svg(data, events, width=args.width,
                                            title=f"specsched · policy {data['config'].get('policy')}"))
        print_wrote(console, f"wrote {args.svg}")
    if args.reliability:
        Path(args.reliability).write_text(reliability(data["calibration"]))
        print_wrote(console, f"wrote {args.reliability}")
    return 0
