"""`specsched whatif TRACE --policy P [--policy Q ...]`: a recorded run re-simulated under other policies."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError, RunConfig
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ..run.flags import BATCHING


def add_whatif_parser(sub) -> None:
    p = sub.add_parser("whatif", help="re-simulate a recorded run (--trace) under other policies")
    p.add_argument("path", metavar="TRACE", help="a `specsched run --trace` file of a --mode seed run")
    p.add_argument("--policy", action="append", dest="policies", default=[], metavar="NAME",
                   help="repeatable: a policy to re-simulate under (built-in name, file.py:Class, module:Class)")
    p.add_argument("--svg", default=None, metavar="DIR", help="write each predicted schedule's Gantt chart here")
    p.set_defaults(func=cmd_whatif)


def cmd_whatif(args: argparse.Namespace, console: Console) -> int:
    from ..run.trace import load_events
    from .whatif import recorded, simulate

    if not args.policies:
        raise ConfigError("name at least one --policy to re-simulate under")
    if batching := [name for name in args.policies if name in BATCHING]:  # before any is re-simulated
        raise ConfigError(f"what-if cannot re-simulate --policy {batching[0]}: it verifies several drafts in one "
                          "forward, and a verification's recorded time is one draft's (batching is not modelled)")
    data, events = load_events(args.path)
    commits = (data.get("trace") or {}).get("commits")
    if commits is None:
        raise ConfigError(f"{args.path}: no trace section: record the run with `specsched run --trace PATH`")
    config = RunConfig.from_dict(data["config"])
    run = recorded(config, events, [(float(t), int(s), int(n)) for t, s, n in commits])
    tokens = {s["id"]: len(s["tokens"]) for s in data["sequences"]}
    recorded = measure_os(events, tokens)
    table = Table(title=f"what-if: {args.path} (recorded under {config.policy}), virtual time",
                  title_justify="left")
    for column in ("policy", "makespan", "mean turnaround", "mean response", "mean waiting", "utilisation"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    table.add_row(f"{config.policy} (recorded)", *_cells(recorded.window_s, recorded))
    predictions = {name: simulate(config, run, name) for name in args.policies}  # a policy that fails: no chart
    for name, prediction in predictions.items():
        table.add_row(f"{name} (predicted)", *_cells(prediction.makespan_s, prediction.os))
        if args.svg:
            _write_chart(Path(args.svg) / f"{_file_name(name)}.svg", config, name, prediction, tokens)
    console.print(table)
    console.print("The output would be the same under every policy (per-sequence random streams); only "
                  "the timing is predicted. Ignored: batching, contention between processes.", highlight=False)
    return 0


def _cells(makespan: float, o: OsMetrics) -> list[str]:
    def s(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f} s"

    return [s(makespan), s(o.mean_turnaround_s), s(o.mean_response_s), s(o.mean_waiting_s),
            f"{100 * o.utilisation:.1f} %"]


def _write_chart(path: Path, config: RunConfig, policy: str, prediction, tokens: dict[int, int]) -> None:
    from ...engine.collected import Collected
    from ..commands.export import chart_svg

    collected = Collected(tokens={seq: [0] * n for seq, n in tokens.items()}, done=set(tokens),
                          events=prediction.events, started=0.0)
    path.write_text(chart_svg(dataclasses.replace(config, policy=policy), collected,
                              title=f"specsched · what-if · policy {policy}"))


def _file_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in policy)
