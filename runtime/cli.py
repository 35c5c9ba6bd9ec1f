"""`specsched`: the command line. `specsched run` is the main job."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import NoReturn

from rich.console import Console

from specsched.policies.loader import PolicyError
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.engine.collected import Interrupted
from specsched.runtime.exits import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    exit_now,
    fail,
    stopped_status,
)
from specsched.runtime.flags import add_run_flags, config_from_args, max_batch, name_list
from specsched.runtime.help_text import DefaultsHelp
from specsched.runtime.output_paths import check_outputs
from specsched.runtime.remote_cli import JOIN_TIMEOUT_S, check_remote_workers
from specsched.runtime.view.console import make_console, replace_what_the_output_cannot_encode
from specsched.runtime.workload_cli import add_workload_flags, wants_workload

ABOUT = """Speculative decoding, scheduled the way an operating system schedules processes: draft-worker
processes draft tokens in parallel and one target-verifier process verifies them, under a scheduling
policy (fcfs, priority, rr, batch, ... or your own). Lossless: greedy output is the target's own."""
EXAMPLES = """examples:
  specsched run --policy fcfs                       a Tree-of-Thoughts tree on the default pair (SmolLM2-135M)
  specsched run --prompt "Name three colours."      one prompt, three draft workers, the live Gantt view
  specsched run --backend sim --prompt "lo mi"      simulated models: no download, seconds
  specsched compare --backend sim --prompt "lo mi"  the same run under fcfs, priority and rr
  specsched serve --port 8000                       an OpenAI-compatible HTTP server (docs/serve.md)
  specsched rerun record.json                       run a `run --json` record again: the same tokens?
  specsched bench --smoke                           the benchmark harness, end to end
  specsched teach                                   a scheduling exercise

`specsched COMMAND --help` lists a command's flags; README.md says everything."""


class OneLineParser(argparse.ArgumentParser):
    """Bad flags get one line, like every other bad input (argparse prints the whole usage first)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelp)  # subcommands' parsers are OneLineParsers too
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"specsched: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="specsched", description=ABOUT, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    from specsched import __version__

    parser.add_argument("--version", action="version", version=f"specsched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="decode prompts with scheduled speculative decoding (none: a Tree-of-Thoughts "
                                     "tree, the main job)")
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
    run.add_argument("--join-timeout", type=float, default=None, metavar="S",
                     help=f"with --remote-workers: how long to wait for them, in seconds (default {JOIN_TIMEOUT_S:g})")
    run.set_defaults(func=cmd_run)
    # the commands in the order `specsched --help` lists them: running, measuring, watching, teaching, set-up
    add_compare_parser(sub)
    from specsched.runtime.apps.serve.cli import add_serve_parser

    add_serve_parser(sub)
    from specsched.runtime.rerun_cli import add_rerun_parser

    add_rerun_parser(sub)
    from specsched.runtime.bench.cli import add_bench_parser

    add_bench_parser(sub)
    from specsched.runtime.watch_cli import add_watch_parsers

    add_watch_parsers(sub)
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
    from specsched.runtime.remote_cli import add_remote_parsers

    add_remote_parsers(sub)
    return parser


def add_compare_parser(sub) -> None:
    """`compare`: the same seeded workload under several policies, side by side."""
    compare = sub.add_parser("compare", help="the same seeded workload under several policies")
    compare.add_argument("--policies", type=name_list, default=["fcfs", "priority", "rr"],
                         metavar="P1,P2,...", help="policies to compare")
    add_run_flags(compare, policy=False)
    add_workload_flags(compare)
    compare.add_argument("--svg", default=None, metavar="DIR", help="write each policy's Gantt chart here")
    compare.set_defaults(func=cmd_compare, policy="fcfs")   # each run gets one of --policies


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.prompt_run import run_prompts
    from specsched.runtime.tot.cli import cmd_tot, wants_tot

    config = config_from_args(args)
    remote = check_remote_workers(args, config)
    if remote and (wants_workload(args) or wants_tot(args)):
        raise ConfigError("--remote-workers applies to a --prompt run (a workload or a tree uses workers that have "
                          "joined, without waiting for them)")
    if wants_workload(args):
        from specsched.runtime.workload_cli import cmd_run_workload

        return cmd_run_workload(args, console, config)
    if wants_tot(args):
        return cmd_tot(args, console, config)
    return run_prompts(args, console, config, remote)[1]


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

        from specsched.runtime.engine.provenance import provenance

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

    load_policy(config.policy, config.policy_timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = make_console()
    from specsched.runtime.engine.stopping import stop_signals
    from specsched.runtime.models.errors import ModelError, UnknownModel

    with stop_signals():  # Ctrl-C 130, SIGTERM 143: every command tears down; a second signal loses nothing
        try:
            # `models` handlers take (args); the others (args, console)
            check_outputs(args)
            takes_console = len(inspect.signature(args.func).parameters) > 1
            return args.func(args, console) if takes_console else args.func(args)
        except (ConfigError, PolicyError) as exc:
            fail(str(exc))
            return EXIT_BAD_INPUT
        except UnknownModel as exc:  # a --target / --draft that names nothing: bad input
            fail(" ".join(str(exc).split()))
            return EXIT_BAD_INPUT
        except ModelError as exc:  # no cache and no network, checksum mismatch, corrupt archive
            fail(" ".join(str(exc).split()))
            return EXIT_FAILED
        except Interrupted:  # SIGTERM, raised through a command (bench ends on a run stopped by it)
            fail("interrupted (SIGTERM)")
            return EXIT_TERMINATED
        except KeyboardInterrupt:
            fail("interrupted")
            return EXIT_INTERRUPTED
        except OSError as exc:  # an output the machine would not take after the work (a full disk): one line
            fail(f"{exc.strerror or exc or type(exc).__name__}" + (f": {exc.filename}" if exc.filename else ""))
            return EXIT_FAILED


def entry() -> NoReturn:
    """The `specsched` command: main(), then a quick exit (exits.exit_now)."""
    replace_what_the_output_cannot_encode()
    exit_now(main())


if __name__ == "__main__":
    entry()
