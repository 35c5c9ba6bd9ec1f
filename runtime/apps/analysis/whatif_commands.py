"""`specsched whatif`: the command (whatif_cli.py: its parser)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError, RunConfig
from ...engine.collected import Collected
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ..commands.export import chart_svg
from .recorded_run import from_trace
from .whatif import simulate


def cmd_whatif(args: argparse.Namespace, console: Console) -> int:
    if not args.policies:
        raise ConfigError("name at least one --policy to re-simulate under")
    if args.max_batch is not None and args.max_batch < 0:
        raise ConfigError(f"--max-batch must be >= 0 (0 = every ready draft), got {args.max_batch}")
    data, config, events, run = from_trace(args.path)
    tokens = {s["id"]: len(s["tokens"]) for s in data["sequences"]}
    measured = measure_os(events, tokens)
    table = Table(title=f"what-if: {args.path} (recorded under {config.policy}), virtual time",
                  title_justify="left")
    for column in ("policy", "makespan", "mean turnaround", "mean response", "mean waiting", "utilisation"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    table.add_row(f"{config.policy} (recorded)", *_cells(measured.window_s, measured))
    predictions = {name: simulate(config, run, name, max_batch=args.max_batch)  # a policy that fails: no chart
                   for name in args.policies}
    for name, prediction in predictions.items():
        table.add_row(f"{name} (predicted)", *_cells(prediction.makespan_s, prediction.os))
        if args.svg:
            _write_chart(Path(args.svg) / f"{_file_name(name)}.svg", config, name, prediction, tokens)
    console.print(table)
    console.print("The output would be the same under every policy (per-sequence random streams); only "
                  "the timing is predicted. Ignored: contention between processes that another order would "
                  "change.", highlight=False)
    if args.json:
        Path(args.json).write_text(json.dumps(_json(args.path, config, measured, predictions), indent=1) + "\n")
    return 0


def _json(path: str, config: RunConfig, measured: OsMetrics, predictions: dict) -> dict:
    """What the table shows, and each prediction's order of verifications and missed deadlines."""
    return {"trace": str(path), "recorded": {"policy": config.policy, "makespan_s": measured.window_s,
                                             "os_metrics": measured.to_json()},
            "predicted": {name: {"makespan_s": p.makespan_s, "os_metrics": p.os.to_json(), "order": order(p),
                                 "missed": p.missed} for name, p in predictions.items()}}


def order(prediction) -> list[int]:
    """The sequences in the order the verifier would verify them (a batch: its sequences, in its order)."""
    return [e.seq for e in sorted(prediction.events, key=lambda e: e.start) if e.role == "draft" and e.kind == "verify"]


def _cells(makespan: float, o: OsMetrics) -> list[str]:
    def s(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f} s"

    return [s(makespan), s(o.mean_turnaround_s), s(o.mean_response_s), s(o.mean_waiting_s),
            f"{100 * o.utilisation:.1f} %"]


def _write_chart(path: Path, config: RunConfig, policy: str, prediction, tokens: dict[int, int]) -> None:
    collected = Collected(tokens={seq: [0] * n for seq, n in tokens.items()}, done=set(tokens),
                          events=prediction.events, started=0.0)
    path.write_text(chart_svg(dataclasses.replace(config, policy=policy), collected,
                              title=f"specsched · what-if · policy {policy}"))


def _file_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in policy)
