"""`specsched keys DIR` and `specsched worker --connect`: the commands (remote_cli.py: their parsers)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...core.config import ConfigError, RunConfig
from ...core.security import ENGINE_KEY, WORKER_KEY, load_keys, write_keys
from ...engine.remote import Refused, check_connect, join


def cmd_keys(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    if not args.dir:
        raise ConfigError("DIR is empty: give the folder to write engine.key and worker.key in")
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} exists and is not a directory")
    if held := [name for name in (ENGINE_KEY, WORKER_KEY) if (directory / name).exists()]:
        raise ConfigError(f"{directory} already holds {' and '.join(held)}: new keys would lock out every worker "
                          "given the old ones; remove them first, or choose another DIR")
    try:
        engine, worker = write_keys(directory)
    except OSError as exc:
        raise ConfigError(f"cannot write keys into {directory}: {exc.strerror or exc}") from None
    print(f"wrote {engine} (the engine's: --keys {directory}) and {worker} (a worker's: --key {worker}); "
          "keep both private")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    endpoint = check_connect(args.connect)
    keys = load_keys(args.key, engine=False)
    overrides = {k: v for k, v in {"draft": args.draft, "target": args.target, "sim_vocab": args.sim_vocab,
                                   "sim_agreement": args.sim_agreement, "sim_draft_ms": args.sim_draft_ms}.items()
                 if v is not None}
    if not args.join_timeout > 0:  # nan too
        raise ConfigError(f"--join-timeout must be > 0 seconds, got {args.join_timeout}")
    sim = {k: v for k, v in overrides.items() if k.startswith("sim_")}
    if sim:  # a run's own range checks (config_checks.py), before the engine is asked
        RunConfig.of(backend="sim", **sim)
    try:
        return join(endpoint, keys.for_worker(), overrides, timeout_s=args.join_timeout)
    except Refused as exc:
        print(f"specsched: error: {exc}", file=sys.stderr)
        return exc.code
