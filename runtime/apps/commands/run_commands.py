"""`specsched run` and `specsched compare`: the commands (cli.py: their parsers)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rich.console import Console

from ....policies.loader import load_policy
from ...core.config import ConfigError, RunConfig
from ...engine.provenance import provenance
from ..run.exits import EXIT_FAILED, stopped_status
from ..run.flag_config import config_from_args, max_batch
from ..tot.tot_cli import wants_tot
from ..tot.tot_commands import cmd_tot
from .compare import compare, policy_configs, print_comparison
from .prompt_run import run_prompts
from .remote_cli import check_remote_workers
from .workload_cli import wants_workload
from .workload_commands import cmd_compare_workload, cmd_run_workload


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    config = config_from_args(args)
    remote = check_remote_workers(args, config)
    if remote and (wants_workload(args) or wants_tot(args)):
        raise ConfigError("--remote-workers applies to a --prompt run (a workload or a tree uses workers that have "
                          "joined, without waiting for them)")
    if wants_workload(args):
        return cmd_run_workload(args, console, config)
    if wants_tot(args):
        return cmd_tot(args, console, config)
    return run_prompts(args, console, config, remote)[1]


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    configs = []
    for c in policy_configs(config_from_args(args), args.policies):
        as_run = argparse.Namespace(**{**vars(args), "policy": c.policy})   # what `run --policy` would do
        configs.append(dataclasses.replace(c, max_batch=max_batch(as_run)))
    if wants_workload(args):
        return cmd_compare_workload(args, console, configs)
    for c in configs:   # every policy loads before any process starts: bad input costs one line
        prepare_check(c)
    records = compare(configs, console)
    if args.json:
        block = provenance(configs[0], records[0].collected.threads if records else None)
        Path(args.json).write_text(json.dumps({"provenance": block, "policies": [r.to_json() for r in records]},
                                              indent=1))
    identical = print_comparison(records, console, svg_dir=args.svg)
    interrupted = [r for r in records if r.status == "interrupted"]
    if interrupted:
        return stopped_status(interrupted[-1].stopped_by)
    return 0 if identical else EXIT_FAILED


def prepare_check(config: RunConfig) -> None:
    load_policy(config.policy, config.supervision.policy_timeout_s)
