"""`specsched`: the command line. `specsched run` is the main job."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import os
import signal
import sys
import threading

from rich.console import Console

from specsched.policies.loader import PolicyError
from specsched.runtime.config import BACKENDS, MODES, ConfigError, RunConfig

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
    run.add_argument("--trace", default=None, metavar="PATH",
                     help="record the whole run (config, events, results) for `specsched replay`")
    run.add_argument("--no-live", action="store_true",
                     help="no live view (on a terminal) and no progress lines (elsewhere)")
    run.set_defaults(func=cmd_run)
    add_watch_commands(sub)
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
    export.set_defaults(func=cmd_export)
    compare = sub.add_parser("compare", help="the same seeded workload under several policies",
                             formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    compare.add_argument("--policies", type=_name_list, default=["fcfs", "priority", "rr"],
                         metavar="P1,P2,...", help="policies to compare")
    add_run_flags(compare, policy=False)
    compare.add_argument("--svg", default=None, metavar="DIR", help="write each policy's Gantt chart here")
    compare.set_defaults(func=cmd_compare, policy="fcfs")   # each run gets one of --policies


def add_run_flags(p: argparse.ArgumentParser, *, policy: bool = True) -> None:
    d = RunConfig()
    p.add_argument("--prompt", action="append", dest="prompts", default=[], metavar="TEXT",
                   help="repeatable: one prompt shared by all workers, or one per worker")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="draft workers = sequences (default: number of prompts, or 3)")
    p.add_argument("--k", type=int, default=d.k, help="draft tokens per round")
    p.add_argument("--k-config", type=_int_list, default=[], metavar="W1,W2,...",
                   help="draft a token tree: candidates per depth, e.g. 2,2,1 (overrides --k)")
    p.add_argument("--no-replacement", action="store_true",
                   help="tree siblings drawn without replacement (default: i.i.d. from q)")
    p.add_argument("--lookup", type=int, default=None, metavar="N",
                   help="draft from repeated text first: the token after the latest earlier match of the last "
                        "N..2 tokens (q = 1 for it, lossless), else the draft model; 0 = off "
                        "(default: 4 on hf, off on sim)")
    p.add_argument("--min-confidence", type=float, default=d.min_confidence, metavar="P",
                   help="adaptive draft length: below the first draft token, stop a branch where the draft's top "
                        "probability is below P (0 = always draft k)")
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help="drafts a batching policy may verify in one forward; 0 = every ready draft")
    p.add_argument("--lockstep", action="store_true",
                   help="verify only when every worker that still owes a draft has one queued (synchronous "
                        "steps; with --policy batch, one forward per step) instead of as soon as one is ready")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, metavar="M")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help=f"0 = greedy (default {d.temperature:g}; 1 for a --task tree, as in SEED)")
    p.add_argument("--top-k", type=int, default=d.top_k, help="0 = off")
    p.add_argument("--top-p", type=float, default=d.top_p, help="1 = off")
    p.add_argument("--seed", type=int, default=d.seed, metavar="S")
    p.add_argument("--mode", default=d.mode, help=f"one of {', '.join(MODES)}")
    if policy:
        p.add_argument("--policy", default=d.policy,
                       help="fcfs | priority | rr | path/file.py:Class | module:Class | entry-point name")
    p.add_argument("--priorities", type=_int_list, default=[], metavar="P0,P1,...",
                   help="static per-worker priorities for --policy priority (lower = more urgent)")
    p.add_argument("--backend", default=d.backend, help=f"one of {', '.join(BACKENDS)}")
    p.add_argument("--target", default=None, help="hf: target model directory or cached id")
    p.add_argument("--draft", default=None, help="hf: draft model directory or cached id")
    p.add_argument("--raw-prompt", action="store_true", help="do not wrap prompts in the chat template")
    p.add_argument("--dtype", default=d.dtype, help="fp32 (exact) | bf16 | fp16 (faster, not bit-exact)")
    p.add_argument("--transport", default=d.transport, help="ipc (private temp dir) | tcp (loopback)")
    p.add_argument("--verifier-threads", type=int, default=0,
                   help="torch threads of the verifier; 0 = the cores the draft workers leave free")
    # default None: set only when given, so that a --sim-* flag on another backend is an error, not ignored
    p.add_argument("--sim-vocab", type=int, default=None, help=f"sim: vocabulary size (default {d.sim_vocab})")
    p.add_argument("--sim-agreement", type=float, default=None,
                   help=f"sim: 0..1 draft/target agreement (default {d.sim_agreement:g})")
    p.add_argument("--sim-draft-ms", type=float, default=None,
                   help=f"sim: simulated draft forward (default {d.sim_draft_ms:g})")
    p.add_argument("--sim-verify-ms", type=float, default=None,
                   help=f"sim: simulated target forward (default {d.sim_verify_ms:g})")
    p.add_argument("--json", default=None, metavar="PATH", help="write a machine-readable record")
    p.add_argument("--quiet", action="store_true", help="print only the summary")


def _name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]  # an empty name is refused where it is used


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]  # an empty item is a typo, not a value to skip
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _max_batch(args: argparse.Namespace) -> int:
    # --policy batch verifies every ready draft at once unless --max-batch says otherwise
    if args.policy == "batch" and args.max_batch == RunConfig().max_batch:
        return 0
    return args.max_batch


SIM_FLAGS = ("sim_vocab", "sim_agreement", "sim_draft_ms", "sim_verify_ms")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    given = {name: getattr(args, name) for name in SIM_FLAGS if getattr(args, name) is not None}
    if args.backend == "sim":  # refused, not ignored: the sim backend has no models to choose or load
        hf_only = {"--target": args.target, "--draft": args.draft, "--raw-prompt": args.raw_prompt,
                   "--dtype": args.dtype not in (None, RunConfig().dtype)}
        for flag, value in hf_only.items():
            if value:
                raise ConfigError(f"{flag} applies to --backend hf only (this run uses --backend sim)")
    if given and args.backend != "sim" and args.backend in BACKENDS:  # an unknown backend: RunConfig says so
        flag = "--" + next(iter(given)).replace("_", "-")
        raise ConfigError(f"{flag} applies to --backend sim only (this run uses --backend {args.backend})")
    return RunConfig(
        workers=args.workers or 0, k=args.k, k_config=args.k_config, replacement=not args.no_replacement,
        lookup=args.lookup, min_confidence=args.min_confidence,
        max_batch=_max_batch(args), lockstep=args.lockstep, max_new_tokens=args.max_new_tokens,
        temperature=RunConfig().temperature if args.temperature is None else args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        mode=args.mode, policy=args.policy, priorities=args.priorities, backend=args.backend,
        target=args.target, draft=args.draft, prompts=args.prompts, raw_prompt=args.raw_prompt,
        transport=args.transport, dtype=args.dtype, verifier_threads=args.verifier_threads, **given)


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.app import run
    from specsched.runtime.trace import write_trace
    from specsched.runtime.view.live import choose_view, cpu_seconds, view_cost
    from specsched.runtime.view.monitor import Monitor
    from specsched.runtime.view.usage import UsageSampler

    config = config_from_args(args)
    from specsched.runtime.tot.cli import cmd_tot, wants_tot

    if wants_tot(args):
        return cmd_tot(args, console, config)
    usage = UsageSampler()
    view = choose_view(console, Monitor(config, usage), enabled=not args.no_live)
    on_update = view.update if view else (lambda c: usage.sample(c.processes)) if args.trace else None
    before = cpu_seconds()
    with view or contextlib.nullcontext():
        record = run(config, on_update=on_update)
    if view:
        record.extra["view"] = view_cost(view, cpu_seconds() - before)
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
        return EXIT_TERMINATED if "SIGTERM" in (record.error or "") else EXIT_INTERRUPTED
    return 0


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

    if not (args.chrome or args.svg):
        raise ConfigError("nothing to export: give --chrome OUT.json and/or --svg OUT.svg")
    if not MIN_WIDTH <= args.width <= MAX_WIDTH:
        raise ConfigError(f"--width must be in [{MIN_WIDTH}, {MAX_WIDTH}] columns, got {args.width}")
    data, events = load_events(args.path)
    if args.chrome:
        write_chrome(data, events, args.chrome)
        console.print(f"wrote {args.chrome} (open it in https://ui.perfetto.dev or chrome://tracing)",
                      highlight=False)
    if args.svg:
        Path(args.svg).write_text(final_svg(data, events, width=args.width,
                                            title=f"specsched · policy {data['config'].get('policy')}"))
        console.print(f"wrote {args.svg}", highlight=False)
    return 0


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.compare import compare, policy_configs, print_comparison

    configs = []
    for c in policy_configs(config_from_args(args), args.policies):
        as_run = argparse.Namespace(**{**vars(args), "policy": c.policy})   # what `run --policy` would do
        configs.append(dataclasses.replace(c, max_batch=_max_batch(as_run)))
    for c in configs:   # every policy loads before any process starts: bad input costs one line
        prepare_check(c)
    records = compare(configs, console)
    if args.json:
        import json
        from pathlib import Path

        Path(args.json).write_text(json.dumps({"policies": [r.to_json() for r in records]}, indent=1))
    identical = print_comparison(records, console, svg_dir=args.svg)
    if any(r.status == "interrupted" for r in records):
        return EXIT_INTERRUPTED
    return 0 if identical else EXIT_FAILED


FILE_OUTPUTS = ("json", "trace", "markdown", "chrome")  # and export's --svg; compare's --svg is a folder
DIR_OUTPUTS = ("plots",)


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path is checked before any work starts: a run must not end by failing to write its record."""
    from pathlib import Path

    files = [f for f in FILE_OUTPUTS if getattr(args, f, None)]
    dirs = [f for f in DIR_OUTPUTS if getattr(args, f, None)]
    if getattr(args, "svg", None):
        (dirs if getattr(args, "func", None) is cmd_compare else files).append("svg")
    for name in files:
        path, flag = Path(getattr(args, name)), "--" + name
        if path.is_dir() or str(getattr(args, name)).endswith("/"):
            raise ConfigError(f"{flag} {path} is a folder; give a file name")
        if not path.parent.is_dir():
            raise ConfigError(f"{flag} {path}: folder {path.parent} does not exist")
        if not os.access(path if path.exists() else path.parent, os.W_OK):  # /dev/null needs no writable /dev
            raise ConfigError(f"{flag} {path} is not writable")
    for name in dirs:  # an output folder is made now, so a run cannot end by failing to make it
        path, flag = Path(getattr(args, name)), "--" + name
        if path.exists() and not path.is_dir():
            raise ConfigError(f"{flag} {path} is a file; give a folder")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot create this folder ({exc.strerror})") from None
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{flag} {path} is not writable")
    source = getattr(args, "path", None)
    for name in files:
        if source and Path(getattr(args, name)).resolve() == Path(source).resolve():
            raise ConfigError(f"--{name} {getattr(args, name)} would overwrite the trace it reads")


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
    console = Console()
    from specsched.runtime.models.errors import ModelError, UnknownModel

    with _sigint_enabled():
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
        except KeyboardInterrupt:
            _fail("interrupted")
            return EXIT_INTERRUPTED


def _fail(message: str) -> None:
    print(f"specsched: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
