"""`specsched replay` and `specsched export`: watching a recorded run after the fact - played back in the live
view, or written out as a Chrome trace, an SVG Gantt chart or the draft's reliability diagram."""

from __future__ import annotations

import argparse

from rich.console import Console

from ...core.config import ConfigError
from ...engine.provenance import summary as provenance_summary
from ..run.exits import EXIT_FAILED, finish
from ..view.console import print_wrote


def add_watch_parsers(sub) -> None:
    replay = sub.add_parser("replay", help="play a recorded run (--trace) back in the live view")
    replay.add_argument("path", metavar="PATH")
    how = replay.add_mutually_exclusive_group()
    how.add_argument("--speed", type=float, default=1.0, metavar="X", help="play X times faster")
    how.add_argument("--final", action="store_true", help="print the final chart and metrics at once")
    replay.set_defaults(func=cmd_replay)
    export = sub.add_parser("export", help="a recorded run as a Chrome trace (Perfetto) or an SVG chart")
    export.add_argument("path", metavar="PATH", help="a --trace or --json file")
    export.add_argument("--chrome", metavar="OUT.json", help="Chrome Trace Event Format")
    export.add_argument("--svg", metavar="OUT.svg", help="the final Gantt chart as an image")
    export.add_argument("--width", type=int, default=120, help="SVG width in columns")
    export.add_argument("--reliability", metavar="OUT.svg",
                        help="the draft's reliability diagram: acceptance by draft confidence, and the ECE")
    export.set_defaults(func=cmd_export)


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from ..run.trace import ReplayClock, load_trace, replay
    from ..view.dashboard import Dashboard
    from ..view.live import choose_view
    from ..view.monitor import Monitor
    from ..view.usage import RecordedUsage

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


MIN_WIDTH, MAX_WIDTH = 40, 2000  # SVG columns: narrower has no room for the lanes, wider is megabytes


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from ..run.trace import load_events
    from .export import final_svg, write_chrome

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
        from ..bench.plot import reliability

        Path(args.reliability).write_text(reliability(data["calibration"]))
        print_wrote(console, f"wrote {args.reliability}")
    return 0
