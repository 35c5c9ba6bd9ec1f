"""`--help` reads cleanly: every flag explained, its default said once and only where it means something."""

import argparse
import os
import re
import subprocess
import sys

import pytest

from specsched.runtime.apps.cli import build_parser
from specsched.runtime.apps.run.help_text import DefaultsHelp, default_words


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(`specsched` words, parser) for every command and subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(build_parser()))


@pytest.mark.parametrize("words", [w for w in COMMANDS if w], ids=" ".join)
def test_every_flag_is_explained_and_its_default_said_once(words):
    parser = COMMANDS[words]
    text = parser.format_help(everything=True)
    for junk in ("(default: None)", "(default: False)", "(default: [])", "(default: ==SUPPRESS==)"):
        assert junk not in text
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings)
        assert action.help and action.help.strip(), f"specsched {' '.join(words)} {flag} has no help text"
        shown = DefaultsHelp("specsched")._get_help_string(action) % {"default": action.default}
        assert len(re.findall(r"\(default\b", shown)) <= 1, f"{flag}: {shown}"
        if action.metavar is None and action.nargs != 0 and not action.choices:
            assert not re.search(r"[A-Z]+_[A-Z]+", action.dest.upper()), f"{flag} shows its dest as a metavar"


def test_run_help_fits_a_screen_and_help_all_lists_every_flag():
    env = {**os.environ, "COLUMNS": "80"}  # a pipe's width, and a small terminal's
    run = [sys.executable, "-m", "specsched", "run"]
    brief = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert brief.returncode == 0 and len(brief.stdout.splitlines()) <= 60, brief.stdout
    # the flags a first run needs, one short line each; the advanced ones behind --help-all
    assert "--prompt TEXT       decode TEXT" in brief.stdout and "more flags: --help-all" in brief.stdout
    assert "--k-config" not in brief.stdout and "--heartbeat-timeout" not in brief.stdout
    full = subprocess.run([*run, "--help-all"], capture_output=True, text=True, timeout=60, env=env)
    assert full.returncode == 0
    for words in (("run",), ("compare",), ("serve",)):
        parser = COMMANDS[words]
        every = parser.format_help(everything=True)
        flags = [flag for a in parser._actions for flag in a.option_strings if flag.startswith("--")]
        assert [f for f in flags if f not in (full.stdout if words == ("run",) else every)] == []
        assert [f for f in flags if f not in parser.format_help()], f"{words}: --help shows every flag"
    assert "--remote-workers" in full.stdout and "--sim-verify-ms" in full.stdout


def test_run_help_names_the_defaults_a_user_looks_for():
    text = " ".join(COMMANDS[("run",)].format_help().split())
    assert "--k K draft tokens per round (default: 4)" in text
    assert "(default: the smollm2 preset's target)" in text
    assert "--max-new-tokens M tokens each sequence generates at most (default: 32)" in text
    assert "--policies" not in text and "(default: fcfs)" in text
    assert "(default: fcfs,priority,rr)" in " ".join(COMMANDS[("compare",)].format_help().split())


@pytest.mark.parametrize("value, words", [(None, None), (False, None), ([], None), (0, "0"), (1.0, "1"),
                                          (0.02, "0.02"), (["a", "b"], "a,b"), ("auto", "auto")])
def test_default_words(value, words):
    assert default_words(value) == words


def test_the_top_level_help_says_what_specsched_is_and_starts_with_the_main_job():
    text = COMMANDS[()].format_help()
    assert "{run,compare,serve,rerun,bench," in text and "operating system" in text
    assert "examples:\n  specsched run --policy fcfs" in text


def test_version():
    from cli_runs import specsched

    from specsched import __version__

    result = specsched("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"specsched {__version__}")
