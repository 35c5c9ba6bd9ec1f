"""`specsched keys DIR` and `specsched worker --connect`: CURVE keys, and draft workers on other hosts.

    specsched keys keys/                                       # engine.key, worker.key (0600)
    specsched run --listen 10.0.0.1:5555 --keys keys/ --remote-workers 1 --prompt "..."
    specsched worker --connect tcp://10.0.0.1:5555 --key keys/worker.key      # on the other host
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...core.config import ConfigError, RunConfig


def add_remote_parsers(sub) -> None:
    keys = sub.add_parser("keys", help="write CURVE keys for --transport tcp: DIR/engine.key and DIR/worker.key")
    keys.add_argument("dir", metavar="DIR")
    keys.set_defaults(func=".commands.remote_commands:cmd_keys")
    worker = sub.add_parser("worker", help="join a running engine (run --listen) as a draft worker from this host")
    worker.add_argument("--connect", required=True, metavar="tcp://HOST:PORT", help="the engine's --listen address")
    worker.add_argument("--key", required=True, metavar="FILE", help="worker.key from `specsched keys` (or its DIR)")
    worker.add_argument("--draft", default=None, metavar="DIR",
                        help="hf: this host's draft model (default: the engine's draft, resolved on this host)")
    worker.add_argument("--target", default=None, metavar="DIR",
                        help="hf: this host's copy of the target (the shipped draft reads its tokenizer)")
    worker.add_argument("--sim-vocab", type=int, default=None, metavar="V",
                        help="sim: this worker's vocabulary (default: the engine's)")
    worker.add_argument("--sim-agreement", type=float, default=None, metavar="A",
                        help="sim: this worker's draft agreement (default: the engine's)")
    worker.add_argument("--sim-draft-ms", type=float, default=None, metavar="MS",
                        help="sim: this worker's draft forward, in ms (default: the engine's)")
    worker.add_argument("--join-timeout", type=float, default=30.0, metavar="S",
                        help="give up when the engine has not answered within S seconds")
    worker.set_defaults(func=".commands.remote_commands:cmd_worker")


JOIN_TIMEOUT_S = 120.0  # run --remote-workers: how long the job waits for them to join


def check_remote_workers(args: argparse.Namespace, config: RunConfig) -> int:
    """--remote-workers N as given (0 if none), or one clear line; says how to start them."""
    n = getattr(args, "remote_workers", 0)
    if args.join_timeout is None:  # not given: refused without --remote-workers, not ignored
        args.join_timeout = JOIN_TIMEOUT_S
    elif not n:
        raise ConfigError("--join-timeout applies to --remote-workers N (how long to wait for them)")
    if not args.join_timeout > 0:
        raise ConfigError(f"--join-timeout must be > 0 seconds, got {args.join_timeout}")
    if not n:
        return 0
    if n < 0:
        raise ConfigError(f"--remote-workers must be >= 0, got {n}")
    if not config.network.listen:
        raise ConfigError("--remote-workers needs --listen HOST:PORT (where they join) and --keys DIR")
    if n > config.draft_workers:
        raise ConfigError(f"--remote-workers {n}, but the job runs {config.draft_workers} draft workers "
                          f"(--mode {config.mode})")
    print(f"waiting for {n} worker(s) from other hosts: specsched worker --connect tcp://{config.network.listen} "
          f"--key {Path(config.network.keys) / 'worker.key' if Path(config.network.keys).is_dir() else '<worker.key>'}",
          file=sys.stderr)
    return n
