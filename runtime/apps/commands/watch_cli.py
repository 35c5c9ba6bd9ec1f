"""`specsched replay` and `specsched export`: watching a recorded run after the fact - played back in the live
view, or written out as a Chrome trace, an SVG Gantt chart or the draft's reliability diagram."""

from __future__ import annotations


def add_watch_parsers(sub) -> None:
    replay = sub.add_parser("replay", help="play a recorded run (--trace) back in the live view")
    replay.add_argument("path", metavar="PATH")
    how = replay.add_mutually_exclusive_group()
    how.add_argument("--speed", type=float, default=1.0, metavar="X", help="play X times faster")
    how.add_argument("--final", action="store_true", help="print the final chart and metrics at once")
    replay.set_defaults(func=".commands.watch_commands:cmd_replay")
    export = sub.add_parser("export", help="a recorded run as a Chrome trace (Perfetto) or an SVG chart")
    export.add_argument("path", metavar="PATH", help="a --trace or --json file")
    export.add_argument("--chrome", metavar="OUT.json", help="Chrome Trace Event Format")
    export.add_argument("--svg", metavar="OUT.svg", help="the final Gantt chart as an image")
    export.add_argument("--width", type=int, default=120, help="SVG width in columns")
    export.add_argument("--reliability", metavar="OUT.svg",
                        help="the draft's reliability diagram: acceptance by draft confidence, and the ECE")
    export.set_defaults(func=".commands.watch_commands:cmd_export")


MIN_WIDTH, MAX_WIDTH = 40, 2000  # SVG columns: narrower has no room for the lanes, wider is megabytes
