"""`specsched`: the command line. `specsched run` is the main job.

Every command's parser is built for `--help`; a command whose module imports torch (`models distill`, `models
features`) is named by that module, imported only once the command's input has been checked (`handler`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
from typing import NoReturn

from ... import __version__
from ...policies.loader import PolicyError
from ..core.config import ConfigError
from ..engine.collected import Interrupted
from ..engine.stopping import stop_signals
from ..models.errors import ModelError, UnknownModel
from .analysis.rerun_cli import add_rerun_parser
from .analysis.teach_cli import add_teach_parser
from .analysis.whatif_cli import add_whatif_parser
from .bench.bench_cli import add_bench_parser
from .commands.remote_cli import JOIN_TIMEOUT_S, add_remote_parsers
from .commands.watch_cli import add_watch_parsers
from .commands.workload_cli import add_workload_flags
from .drafts.models_cli import add_models_parser
from .run.exits import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    exit_now,
    fail,
)
from .run.flags import add_run_flags, name_list
from .run.help_text import NEWCOMER, DefaultsHelp, TwoLevelHelp
from .run.output_paths import check_outputs
from .serve.load_cli import add_load_parser
from .serve.serve_cli import add_serve_parser
from .tot.tot_cli import add_tot_flags
from .view.console import make_console, replace_what_the_output_cannot_encode

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

`specsched COMMAND --help` lists a command's flags; README.md and docs/ say everything."""


class OneLineParser(TwoLevelHelp):
    """Bad flags get one line, like every other bad input (argparse prints the whole usage first)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelp)  # subcommands' parsers are OneLineParsers too
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"specsched: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="specsched", description=ABOUT, epilog=EXAMPLES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"specsched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="decode prompts with scheduled speculative decoding (none: a Tree-of-Thoughts "
                                     "tree, the main job)",
                         description="Decode --prompt TEXT with draft workers and one verifier; with no --prompt, "
                                     "build a Tree-of-Thoughts tree (the main job).")
    groups = add_run_flags(run)
    add_tot_flags(run)
    add_workload_flags(run.add_argument_group("jobs arriving over time (instead of --prompt)"))
    groups["output"].add_argument("--trace", default=None, metavar="PATH",
                                  help="record the run for `specsched replay` and `export`")
    groups["output"].add_argument("--no-live", action="store_true",
                                  help="no live view (and no progress lines in a pipe)")
    groups["faults"].add_argument("--remote-workers", type=int, default=0, metavar="N",
                                  help="with --listen: wait for N workers from other hosts to join; they draft first")
    groups["faults"].add_argument("--join-timeout", type=float, default=None, metavar="S",
                                  help=f"with --remote-workers: how long to wait for them, in seconds "
                                       f"(default {JOIN_TIMEOUT_S:g})")
    run.set_defaults(func=".commands.run_commands:cmd_run")
    # the commands in the order `specsched --help` lists them: running, measuring, watching, teaching, set-up
    add_compare_parser(sub)
    add_serve_parser(sub)
    add_rerun_parser(sub)
    bench = add_bench_parser(sub)
    add_load_parser(bench.add_subparsers(dest="bench_command", metavar="{serve}", required=False))  # `bench serve`
    add_watch_parsers(sub)
    add_whatif_parser(sub)
    add_teach_parser(sub)
    add_models_parser(sub)
    add_remote_parsers(sub)
    # the commands that take every run flag show a newcomer's few in --help, and all of them in --help-all
    advanced = frozenset(a.dest for a in run._actions if a.option_strings) - NEWCOMER - {"help"}
    for name in ("run", "compare", "serve"):
        sub.choices[name].hide_from_help(advanced)
    return parser


def add_compare_parser(sub) -> None:
    """`compare`: the same seeded workload under several policies, side by side."""
    compare = sub.add_parser("compare", help="the same seeded workload under several policies")
    compare.add_argument("--policies", type=name_list, default=["fcfs", "priority", "rr"],
                         metavar="P1,P2,...", help="policies to compare")
    add_run_flags(compare, policy=False)
    add_workload_flags(compare)
    compare.add_argument("--svg", default=None, metavar="DIR", help="write each policy's Gantt chart here")
    compare.set_defaults(func=".commands.run_commands:cmd_compare", policy="fcfs")   # each run gets one of --policies


def required_positional(func) -> list[str]:
    """The parameters a handler must be given: (args) or (args, console); one with a default (a recipe's
    `log=print`) is not asked for."""
    return [p.name for p in inspect.signature(func).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = make_console()

    with stop_signals():  # Ctrl-C 130, SIGTERM 143: every command tears down; a second signal loses nothing
        try:
            # `models` handlers take (args); the others (args, console)
            check_outputs(args)
            if check := getattr(args, "check", None):  # a command named by its module: its input first
                check(args)
            func = handler(args.func)
            takes_console = len(required_positional(func)) > 1
            return func(args, console) if takes_console else func(args)
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


def handler(func):
    """A command's function: `func` itself, or for "module:function" (relative to this package) that function."""
    if not isinstance(func, str):
        return func
    module, name = func.split(":")
    # lazy: the command's module imports torch + transformers, ~11 s of start-up (measured 2026-11-27), which
    # `--help` and the refusal of bad input do without
    return getattr(importlib.import_module(module, __package__), name)


def entry() -> NoReturn:
    """The `specsched` command: main(), then a quick exit (exits.exit_now)."""
    replace_what_the_output_cannot_encode()
    exit_now(main())


if __name__ == "__main__":
    entry()
