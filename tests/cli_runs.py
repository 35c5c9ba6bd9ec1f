"""The command line as a user runs it: `specsched ...` in a subprocess, and what it prints and writes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from helpers import FAST

REPO = Path(__file__).resolve().parents[1]  # the checkout: its launcher bin/specsched and its files

PLAIN_PROMPT = "Write three short steps to make a cup of tea."

# The sim backend with small simulated forward costs (helpers.FAST as flags): fast runs.
FAST_FLAGS = ["--backend", "sim", *(a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", f"{v:g}"))]


def cli_command(*args: str) -> list[str]:
    """`specsched run ARGS`; plain decoding of one shared prompt unless ARGS choose prompts or a --task
    (without a prompt, `run` builds a Tree-of-Thoughts tree)."""
    plain = [] if {"--prompt", "--task"} & set(args) else ["--prompt", PLAIN_PROMPT]
    sim = [] if "--backend" in args else ["--backend", "sim"]  # the CLI's default is the real pair (hf)
    return [sys.executable, "-m", "specsched", "run", *plain, *sim, *args]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def specsched(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`python -m specsched ARGS` as a user runs it (any subcommand); kwargs go to subprocess.run (env, cwd)."""
    return subprocess.run([sys.executable, "-m", "specsched", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def stderr_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def assert_one_error_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    lines = stderr_lines(result.stderr)
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("specsched: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def bench_args(*argv: str) -> argparse.Namespace:
    """`specsched bench ARGV` as the CLI parses it."""
    from specsched.runtime.apps.bench.bench_cli import add_bench_parser

    parser = argparse.ArgumentParser(prog="specsched")
    add_bench_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["bench", *argv])
