"""Every command the `specsched` parser names resolves to a function that the dispatcher calls right."""

from __future__ import annotations

import argparse

from specsched.runtime.apps.cli import build_parser, handler, required_positional


def _funcs(parser: argparse.ArgumentParser, path: str = "specsched"):
    """(command path, func) for every parser that sets a handler, subcommands included."""
    func = parser.get_default("func")
    if func is not None:
        yield path, func
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _funcs(sub, f"{path} {name}")


def test_each_command_takes_args_or_args_and_the_console():
    seen = dict(_funcs(build_parser()))
    assert "specsched models features" in seen and "specsched run" in seen
    for path, func in seen.items():
        assert required_positional(handler(func)) in (["args"], ["args", "console"]), path


def test_a_recipe_with_a_log_default_is_called_with_its_args_only():
    """`specsched models features` once got the console as its `log` and failed on its first line."""
    seen = dict(_funcs(build_parser()))
    assert required_positional(handler(seen["specsched models features"])) == ["args"]
