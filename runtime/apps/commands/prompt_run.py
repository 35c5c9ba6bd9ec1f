"""One run of prompts as `specsched run --prompt ...` makes it: the live view (or progress lines), the run,
its record printed and written (`--json`, `--trace`). `run` and `rerun` both end here."""

from __future__ import annotations

import argparse
import contextlib

from rich.console import Console

from ...core.config import RunConfig
from ...engine.record import RunRecord
from ..run.app import run
from ..run.exits import EXIT_FAILED, fail, finish
from ..run.trace import write_trace
from ..view.gpu_usage import gpu_summary, mean_busy
from ..view.live import choose_view, cpu_seconds, view_cost
from ..view.monitor import Monitor
from ..view.usage import UsageSampler


def run_prompts(args: argparse.Namespace, console: Console, config: RunConfig,
                remote: int = 0) -> tuple[RunRecord, int]:
    """The record, and the status the command ends with. `args` gives --no-live, --quiet, --json, --trace
    (and --join-timeout with `remote` workers from other hosts)."""
    usage = UsageSampler(lanes=config.lanes.processes)  # --branch-processes: each lane process gets a line
    view = choose_view(console, Monitor(config, usage), enabled=not args.no_live)
    sampled = args.trace or usage.gpu.on  # GPU use goes into the record, live view or not
    on_update = view.update if view else (lambda c: usage.sample(c.processes)) if sampled else None
    before = cpu_seconds()
    with view or contextlib.nullcontext():
        record = run(config, on_update=on_update, remote_workers=remote,
                     join_timeout_s=getattr(args, "join_timeout", None))
    if view:
        record.extra["view"] = view_cost(view, cpu_seconds() - before)
    if gpu := gpu_summary(usage.series):
        record.extra["gpu_usage"] = gpu  # per process: mean SM %, peak GPU memory (view/gpu_usage.py)
    if usage.gpu_busy:
        record.extra["gpu_busy"] = {"mean_percent": mean_busy(usage.gpu_busy), "samples": len(usage.gpu_busy)}
    unwritten = []
    for path, write in ((args.json, record.write_json), (args.trace, lambda p: write_trace(record, p, usage.series))):
        try:
            if path:
                write(path)
        except OSError as exc:  # checked up front, but a disk can fill: the run's output still prints below
            unwritten.append(f"cannot write {path} ({exc.strerror or exc})")
    code = finish(record, console, texts=not args.quiet)
    for line in unwritten:
        fail(line)
    return record, code or (EXIT_FAILED if unwritten else 0)
