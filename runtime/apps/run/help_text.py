"""How `--help` reads: the flags a newcomer needs, one short line each, and every flag behind `--help-all`.

`specsched run` takes some 75 flags; listed together they made a 220-line `--help` in which the few a first run
needs were lost. A run-like parser (run, compare, serve) leaves its `advanced` flags out of `--help` and prints
them all with `--help-all`; docs/cli.md tells the long story of each.

Each flag's default is said once, and only where it tells the reader something: argparse's
ArgumentDefaultsHelpFormatter appends "(default: X)" to every flag, so a help text that already names its
default (often a better one: "default: number of prompts, or 3") read "(default ...) (default: None)". This
formatter appends the default only where the help text names none, and only a default worth reading: not None
(a flag that is unset unless given), not False (a switch), not an empty list.
"""

from __future__ import annotations

import argparse
import sys

# The run flags (by dest) that `run --help` shows: what a first hour needs. Every other run flag is advanced.
NEWCOMER = frozenset({
    "prompts", "workers", "max_new_tokens", "mode",                       # workload
    "task", "data", "problem", "thoughts", "steps", "breadth",            # Tree-of-Thoughts
    "k",                                                                  # drafting
    "temperature", "top_k", "top_p", "seed",                              # sampling
    "policy", "priorities",                                               # scheduling
    "backend", "target", "draft", "device", "dtype",                      # backend and device
    "json", "quiet", "trace", "no_live",                                  # output
})


def default_words(value: object) -> str | None:
    """The default as the reader would type it, or None where it says nothing."""
    if value is None or value is False or value == argparse.SUPPRESS:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or None
    return f"{value:g}" if isinstance(value, float) else str(value)


class DefaultsHelp(argparse.HelpFormatter):
    """`--help` with each flag's default, once (the module's docstring)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        words = default_words(action.default)
        if not action.option_strings or words is None or "default" in help_text:
            return help_text
        return f"{help_text} (default: {words.replace('%', '%%')})"  # argparse %-formats help texts


class TwoLevelHelp(argparse.ArgumentParser):
    """A parser whose `--help` leaves out its `advanced` flags (dests); `--help-all` prints every flag."""

    advanced: frozenset[str] = frozenset()

    def hide_from_help(self, advanced: frozenset[str]) -> None:
        """Leave these of the parser's flags out of `--help`, and add `--help-all`."""
        self.advanced = advanced & {action.dest for action in self._actions}
        self.add_argument("--help-all", action=HelpAll, help="every flag, the advanced ones too (docs/cli.md)")

    def format_help(self, everything: bool = False) -> str:
        # argparse's own format_help, less the advanced flags; its usage line would list ~30 flags
        def shown(actions: list[argparse.Action]) -> list[argparse.Action]:
            return [a for a in actions if everything or a.dest not in self.advanced]

        brief = bool(self.advanced) and not everything
        formatter = self._get_formatter()
        formatter.add_usage("%(prog)s [options]" if brief else self.usage, shown(self._actions),
                            self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        for group in self._action_groups:
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(shown(group._group_actions))
            formatter.end_section()
        if brief:
            formatter.add_text(f"{len(self.advanced)} more flags: --help-all")
        formatter.add_text(self.epilog)
        return formatter.format_help()

    def print_help(self, file=None, everything: bool = False) -> None:
        self._print_message(self.format_help(everything), file or sys.stdout)


class HelpAll(argparse.Action):
    """`--help-all`: the whole help, then exit, as `--help` does."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help(everything=True)
        parser.exit()
