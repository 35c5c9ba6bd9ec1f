"""`specsched whatif`: the command (whatif_cli.py: its parser)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError, RunConfig
from ...core.costs import CostCurve
from ...engine.collected import Collected
from ...engine.osmetrics import OsMetrics
from ...engine.osmetrics import measure as measure_os
from ..commands.export import chart_svg
from .recorded_run import from_trace, read_batch_cost, unpriced_rows
from .whatif import simulate


def cmd_whatif(args: argparse.Namespace, console: Console) -> int:
    if not args.policies:
        raise ConfigError("name at least one --policy to re-simulate under")
    if args.max_batch is not None and args.max_batch < 0:
        raise ConfigError(f"--max-batch must be >= 0 (0 = every ready draft), got {args.max_batch}")
    batch_cost = read_batch_cost(args.batch_cost) if args.batch_cost else None
    tables = [_one_trace(path, args.policies, args.max_batch, batch_cost) for path in args.paths]
    first = tables[0]
    for other in tables[1:]:
        first.same_workload(other)
    n = len(tables)
    title = (f"what-if: {first.path}" if n == 1 else f"what-if: the median of {n} recordings ({first.path}, ...)")
    table = Table(title=f"{title} (recorded under {first.config.policy}), virtual time", title_justify="left")
    for column in ("policy", "makespan", "mean turnaround", "mean response", "mean waiting", "utilisation"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    recorded = Cells.median([t.recorded for t in tables])
    predicted = {name: Cells.median([t.predicted[name] for t in tables]) for name in args.policies}
    table.add_row(f"{first.config.policy} (recorded)", *recorded.text())
    for name in args.policies:
        table.add_row(f"{name} (predicted)", *predicted[name].text())
        if args.svg:
            _write_chart(Path(args.svg) / f"{_file_name(name)}.svg", first.config, name, first.predictions[name],
                         first.tokens)
    console.print(table)
    console.print("The output would be the same under every policy (per-sequence random streams); only "
                  "the timing is predicted. Ignored: contention between processes that another order would "
                  "change." + (f" Each cell: the median over the {n} recordings." if n > 1 else ""),
                  highlight=False)
    if notice := unpriced_rows(args.policies, first.cost, batch_cost):
        console.print(notice, highlight=False)
    if args.json:
        out = tables[0].json() if n == 1 else {
            "traces": [str(t.path) for t in tables],
            "median": {"recorded": asdict(recorded), "predicted": {n: asdict(c) for n, c in predicted.items()}},
            "each": [t.json() for t in tables]}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


@dataclass(frozen=True, slots=True)
class Cells:
    """One row of the table: makespan and the OS metrics it shows (None where a metric has no value)."""
    makespan_s: float
    mean_turnaround_s: float | None
    mean_response_s: float | None
    mean_waiting_s: float | None
    utilisation: float

    @classmethod
    def of(cls, makespan: float, o: OsMetrics) -> Cells:
        return cls(makespan, o.mean_turnaround_s, o.mean_response_s, o.mean_waiting_s, o.utilisation)

    @classmethod
    def median(cls, rows: list[Cells]) -> Cells:
        """Each column's median over the rows (one row: itself)."""
        def mid(name: str):
            values = [getattr(r, name) for r in rows if getattr(r, name) is not None]
            return statistics.median(values) if values else None

        return cls(*(mid(f.name) for f in fields(cls)))

    def text(self) -> list[str]:
        def s(v: float | None) -> str:
            return "–" if v is None else f"{v:.3f} s"

        return [s(self.makespan_s), s(self.mean_turnaround_s), s(self.mean_response_s), s(self.mean_waiting_s),
                f"{100 * self.utilisation:.1f} %"]


@dataclass(slots=True)
class OneTrace:
    """One recording, its measured row and each policy's prediction from it."""
    path: str
    data: dict
    config: RunConfig
    measured: OsMetrics
    predictions: dict
    tokens: dict[int, int]
    cost: CostCurve | None = None  # what the simulator priced a forward by

    @property
    def recorded(self) -> Cells:
        return Cells.of(self.measured.window_s, self.measured)

    @property
    def predicted(self) -> dict[str, Cells]:
        return {name: Cells.of(p.makespan_s, p.os) for name, p in self.predictions.items()}

    def same_workload(self, other: OneTrace) -> None:
        """Several recordings are medianed only if they ran one workload: the same sequences, each with the
        same tokens (a seed run's output does not depend on timing), under the same policy."""
        def tokens(t: OneTrace) -> dict:
            return {s["id"]: list(s["tokens"]) for s in t.data["sequences"]}

        if other.config.policy != self.config.policy:
            raise ConfigError(f"{other.path} was recorded under {other.config.policy}, {self.path} under "
                              f"{self.config.policy}: give recordings of one workload under one policy")
        if tokens(other) != tokens(self):
            raise ConfigError(f"{other.path} and {self.path} record different sequences or tokens: give "
                              "recordings of one workload (the same prompts, seed and settings)")

    def json(self) -> dict:
        """What the table shows, each prediction's order of verifications and missed deadlines, and the curve that
        priced a batch's rows (the trace's own fit, or --batch-cost's)."""
        return {"trace": str(self.path),
                "forward_cost": self.cost.to_list() if self.cost is not None else None,  # a, b, c (s), forwards
                "recorded": {"policy": self.config.policy, "makespan_s": self.measured.window_s,
                             "os_metrics": self.measured.to_json()},
                "predicted": {name: {"makespan_s": p.makespan_s, "os_metrics": p.os.to_json(), "order": order(p),
                                     "missed": p.missed} for name, p in self.predictions.items()}}


def _one_trace(path: str, policies: list[str], max_batch: int | None, batch_cost: CostCurve | None) -> OneTrace:
    data, config, events, run = from_trace(path, batch_cost)
    tokens = {s["id"]: len(s["tokens"]) for s in data["sequences"]}
    predictions = {name: simulate(config, run, name, max_batch=max_batch) for name in policies}
    return OneTrace(path, data, config, measure_os(events, tokens), predictions, tokens, run.cost)


def order(prediction) -> list[int]:
    """The sequences in the order the verifier would verify them (a batch: its sequences, in its order)."""
    return [e.seq for e in sorted(prediction.events, key=lambda e: e.start) if e.role == "draft" and e.kind == "verify"]


def _write_chart(path: Path, config: RunConfig, policy: str, prediction, tokens: dict[int, int]) -> None:
    collected = Collected(tokens={seq: [0] * n for seq, n in tokens.items()}, done=set(tokens),
                          events=prediction.events, started=0.0)
    path.write_text(chart_svg(dataclasses.replace(config, policy=policy), collected,
                              title=f"specsched · what-if · policy {policy}"))


def _file_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in policy)
