"""How `--help` reads: every flag's default said once, and only where it tells the reader something.

argparse's ArgumentDefaultsHelpFormatter appends "(default: X)" to every flag, so a help text that already
names its default (often a better one: "default: number of prompts, or 3") read "(default ...) (default:
None)". This formatter appends the default only where the help text names none, and only a default worth
reading: not None (a flag that is unset unless given), not False (a switch), not an empty list.
"""

from __future__ import annotations

import argparse


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
