"""`specsched`: the command line. `specsched run` is the main job."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import signal
import sys
import threading

from rich.console import Console

from specsched.policies.loader import PolicyError
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.engine.collected import Interrupted
from specsched.runtime.flags import add_run_flags, config_from_args, max_batch, name_list
from specsched.runtime.output_paths import check_outputs
from specsched.runtime.provenance import summary as provenance_summary
from specsched.runtime.remote_cli import check_remote_workers
from specsched.runtime.view.console import make_console
from specsched.runtime.workload_cli import add_workload_flags, wants_workload

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143  # 128 + SIGINT / SIGTERM


class OneLineParser(argparse.ArgumentParser):
    """Bad flags get one line, like every other bad input (argparse prints the whole usage first)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"specsched: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="specsched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="decode prompts with scheduled speculative decoding",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_run_flags(run)
    from specsched.runtime.tot.cli import add_tot_flags

    add_tot_flags(run)
    add_workload_flags(run)
    run.add_argument("--trace", default=None, metavar="PATH",
                     help="record the whole run (config, events, results) for `specsched replay`")
    run.add_argument("--no-live", action="store_true",
                     help="no live view (on a terminal) and no progress lines (elsewhere)")
    run.add_argument("--remote-workers", type=int, default=0, metavar="N",
                     help="with --listen: wait for N workers from other hosts to join; they draft first")
    run.add_argument("--join-timeout", type=float, default=120.0, metavar="S",
                     help="with --remote-workers: how long to wait for them")
    run.set_defaults(func=cmd_run)
    from specsched.runtime.remote_cli import add_remote_parsers

    add_remote_parsers(sub)
    add_watch_commands(sub)
    from specsched.runtime.teach import add_teach_parser
    from specsched.runtime.whatif_cli import add_whatif_parser

    add_whatif_parser(sub)
    add_teach_parser(sub)
    try:
        from specsched.runtime.models.cli import add_models_parser
    except ImportError:
        pass
    else:
        add_models_parser(sub)
    from specsched.runtime.bench.cli import add_bench_parser

    add_bench_parser(sub)
    return parser


def add_watch_commands(sub) -> None:
    """`replay`, `export` and `compare`: watching runs after the fact, and side by side."""
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
    compare = sub.add_parser("compare", help="the same seeded workload under several policies",
                             formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    compare.add_argument("--policies", type=name_list, default=["fcfs", "priority", "rr"],
                         metavar="P1,P2,...", help="policies to compare")
    add_run_flags(compare, policy=False)
    add_workload_flags(compare)
    compare.add_argument("--svg", default=None, metavar="DIR", help="write each policy's Gantt chart here")
    compare.set_defaults(func=cmd_compare, policy="fcfs")   # each run gets one of --policies


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.app import run
    from specsched.runtime.trace import write_trace
    from specsched.runtime.view.gpu_usage import gpu_summary
    from specsched.runtime.view.live import choose_view, cpu_seconds, view_cost
    from specsched.runtime.view.monitor import Monitor
    from specsched.runtime.view.usage import UsageSampler

    config = config_from_args(args)
    from specsched.runtime.tot.cli import cmd_tot, wants_tot

    remote = check_remote_workers(args, config)
    if remote and (wants_workload(args) or wants_tot(args)):
        raise ConfigError("--remote-workers applies to a --prompt run (a workload or a tree uses workers that have "
                          "joined, without waiting for them)")
    if wants_workload(args):
        from specsched.runtime.workload_cli import cmd_run_workload

        return cmd_run_workload(args, console, config)
    if wants_tot(args):
        return cmd_tot(args, console, config)
    usage = UsageSampler()
    view = choose_view(console, Monitor(config, usage), enabled=not args.no_live)
    sampled = args.trace or usage.gpu.on  # GPU use goes into the record, live view or not
    on_update = view.update if view else (lambda c: usage.sample(c.processes)) if sampled else None
    before = cpu_seconds()
    with view or contextlib.nullcontext():
        record = run(config, on_update=on_update, remote_workers=remote, join_timeout_s=args.join_timeout)
    if view:
        record.extra["view"] = view_cost(view, cpu_seconds() - before)
    if gpu := gpu_summary(usage.series):
        record.extra["gpu_usage"] = gpu  # per process: mean SM %, peak GPU memory (view/gpu_usage.py)
    unwritten = []
    for path, write in ((args.json, record.write_json), (args.trace, lambda p: write_trace(record, p, usage.series))):
        try:
            if path:
                write(path)
        except OSError as exc:  # checked up front, but a disk can fill: the run's output still prints below
            unwritten.append(f"cannot write {path} ({exc.strerror or exc})")
    code = _finish(record, console, texts=not args.quiet)
    for line in unwritten:
        _fail(line)
    return code or (EXIT_FAILED if unwritten else 0)


def _finish(record, console: Console, *, texts: bool = True) -> int:
    from specsched.runtime.report import print_record

    print_record(record, console, texts=texts)
    if record.status == "failed":
        _fail(record.error or "run failed")
        return EXIT_FAILED
    if record.status == "interrupted":
        _fail(f"{record.error}; the tokens verified so far are shown above")
        return stopped_status(record.stopped_by)
    return 0


def stopped_status(signal_name: str | None) -> int:
    """The exit status of a run stopped by a signal: 128 + its number (143 SIGTERM, 130 Ctrl-C)."""
    return EXIT_TERMINATED if signal_name == "SIGTERM" else EXIT_INTERRUPTED


def cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.trace import ReplayClock, load_trace, replay
    from specsched.runtime.view.dashboard import Dashboard
    from specsched.runtime.view.live import LiveView, ProgressLines
    from specsched.runtime.view.monitor import Monitor
    from specsched.runtime.view.usage import RecordedUsage

    trace = load_trace(args.path)
    record, collected = trace.record, trace.record.collected
    monitor = Monitor(record.config, RecordedUsage(trace.usage))
    if args.final:
        monitor.feed(collected)
        console.print(Dashboard(monitor.snapshot(collected, ReplayClock(trace).end, final=True)))
    else:
        clock = ReplayClock(trace, args.speed)
        view_cls = LiveView if console.is_terminal else ProgressLines
        with view_cls(monitor, console, clock=clock) as view:
            replay(trace, view.update, clock)
    code = _finish(record, console, texts=False)
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

    from specsched.runtime.export import final_svg, write_chrome
    from specsched.runtime.trace import load_events

    if not (args.chrome or args.svg or args.reliability):
        raise ConfigError("nothing to export: give --chrome OUT.json, --svg OUT.svg and/or --reliability OUT.svg")
    if not MIN_WIDTH <= args.width <= MAX_WIDTH:
        raise ConfigError(f"--width must be in [{MIN_WIDTH}, {MAX_WIDTH}] columns, got {args.width}")
    data, events = load_events(args.path)
    console.print(provenance_summary(data.get("provenance")), markup=False, highlight=False)
    if args.chrome:
        write_chrome(data, events, args.chrome)
        console.print(f"wrote {args.chrome} (open it in https://ui.perfetto.dev or chrome://tracing)",
                      highlight=False)
    if args.svg:
        Path(args.svg).write_text(final_svg(data, events, width=args.width,
                                            title=f"specsched · policy {data['config'].get('policy')}"))
        console.print(f"wrote {args.svg}", highlight=False)
    if args.reliability:
        from specsched.runtime.bench.plot import reliability

        if not sum((data.get("calibration") or {}).get("proposed") or []):
            raise ConfigError(f"{args.path}: no calibration bins (a run that drafted, recorded by this version)")
        Path(args.reliability).write_text(reliability(data["calibration"]))
        console.print(f"wrote {args.reliability}", highlight=False)
    return 0


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.compare import compare, policy_configs, print_comparison

    configs = []
    for c in policy_configs(config_from_args(args), args.policies):
        as_run = argparse.Namespace(**{**vars(args), "policy": c.policy})   # what `run --policy` would do
        configs.append(dataclasses.replace(c, max_batch=max_batch(as_run)))
    if wants_workload(args):
        from specsched.runtime.workload_cli import cmd_compare_workload

        return cmd_compare_workload(args, console, configs)
    for c in configs:   # every policy loads before any process starts: bad input costs one line
        prepare_check(c)
    records = compare(configs, console)
    if args.json:
        import json
        from pathlib import Path

        from specsched.runtime.provenance import provenance

        block = provenance(configs[0], records[0].collected.threads if records else None)
        Path(args.json).write_text(json.dumps({"provenance": block, "policies": [r.to_json() for r in records]},
                                              indent=1))
    identical = print_comparison(records, console, svg_dir=args.svg)
    interrupted = [r for r in records if r.status == "interrupted"]
    if interrupted:
        return stopped_status(interrupted[-1].stopped_by)
    return 0 if identical else EXIT_FAILED


def prepare_check(config: RunConfig) -> None:
    from specsched.policies.loader import load_policy

    load_policy(config.policy)


@contextlib.contextmanager
def _sigint_enabled():
    """Ctrl-C (SIGINT) interrupts the CLI even if it was started with SIGINT ignored - which is how a
    shell without job control starts a background job (``specsched run ... &`` in a script), and a
    child inherits it: a run owns process trees, and without this SIGINT would leave it running.
    Only from the main thread (the only one that may set handlers); the ignore is put back on
    return, so calling ``main()`` from a program that ignores SIGINT changes nothing for it."""
    ignored = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = make_console()
    from specsched.runtime.app import sigterm_interrupts
    from specsched.runtime.models.errors import ModelError, UnknownModel

    with _sigint_enabled(), sigterm_interrupts():  # SIGTERM: every command tears down and exits 143
        try:
            # `models` handlers take (args); the others (args, console)
            check_outputs(args)
            takes_console = len(inspect.signature(args.func).parameters) > 1
            return args.func(args, console) if takes_console else args.func(args)
        except (ConfigError, PolicyError) as exc:
            _fail(str(exc))
            return EXIT_BAD_INPUT
        except UnknownModel as exc:  # a --target / --draft that names nothing: bad input
            _fail(" ".join(str(exc).split()))
            return EXIT_BAD_INPUT
        except ModelError as exc:  # no cache and no network, checksum mismatch, corrupt archive
            _fail(" ".join(str(exc).split()))
            return EXIT_FAILED
        except Interrupted:  # SIGTERM, raised through a command (bench ends on a run stopped by it)
            _fail("interrupted (SIGTERM)")
            return EXIT_TERMINATED
        except KeyboardInterrupt:
            _fail("interrupted")
            return EXIT_INTERRUPTED


def _fail(message: str) -> None:
    print(f"specsched: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
