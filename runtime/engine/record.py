"""The record of one job (a run): its sequences, metrics, counters, events - what `--json` writes.

A one-shot `specsched run` and a job on a long-lived engine produce the same record: sequences and
workers are numbered inside the job, so nothing in it depends on what else the engine ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.config import RunConfig
from .collected import Collected
from .metrics import Metrics, compute
from .osmetrics import OsMetrics
from .osmetrics import measure as measure_os


@dataclass
class SequenceResult:
    id: int
    worker: int
    prompt: str
    tokens: list[int]
    text: str
    finished: bool


@dataclass
class RunRecord:
    config: RunConfig
    sequences: list[SequenceResult]
    metrics: Metrics
    collected: Collected
    status: str = "ok"              # ok | failed | interrupted
    error: str | None = None
    extra: dict = field(default_factory=dict)
    os_metrics: OsMetrics | None = None
    provenance: dict | None = None  # what produced it: runtime/engine/provenance.py
    stopped_by: str | None = None   # "SIGINT" or "SIGTERM" for an interrupted run: its exit status

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "error": self.error,
            "config": self.config.to_dict(),
            "sequences": [s.__dict__ for s in self.sequences],
            "metrics": self.metrics.to_json(),
            "counters": self.collected.counters,
            "cost_curve": self.collected.cost_curve,
            "calibration": self.collected.calibration,
            "verifier_threads": self.collected.verifier_threads,
            **({"beams": self.collected.beams} if self.collected.beams else {}),
            # a worker forking into a dsbd beam slot, exiting it or restarted: [time, worker, kind]
            **({"process_marks": [list(m) for m in self.collected.marks]} if self.collected.marks else {}),
            **({"restarts": self.collected.restarts} if self.collected.restarts else {}),
            "rejected_telemetry": self.collected.rejected_telemetry,  # refused by the engine (engine/reports.py)
            # tcp: handshakes of peers without the run's key (runtime/core/gatekeeper.py)
            "refused_handshakes": self.collected.refused_handshakes,
            **({"hosts": self.collected.hosts} if self.collected.hosts else {}),  # workers on other hosts
            # where each process placed its model, and the --device it was given
            **({"devices": self.collected.devices} if self.collected.devices else {}),
            "events": [e.to_json() for e in sorted(self.collected.events, key=lambda e: e.start)],
            **({"os_metrics": self.os_metrics.to_json()} if self.os_metrics else {}),
            "provenance": self.provenance,
            **({"stopped_by": self.stopped_by} if self.stopped_by else {}),
            **self.extra,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))


def build_record(config: RunConfig, collected: Collected, status: str, error: str | None,
                 decode: Callable[[list[int]], str] = lambda tokens: "", provenance: dict | None = None) -> RunRecord:
    """What a run leaves: each sequence's committed tokens and text, and the metrics of what was reported."""
    sequences = []
    for i in range(config.n_sequences):
        tokens = collected.tokens.get(i, [])
        prompt = config.prompt_for(i) if config.prompts else ""  # interrupted before the default prompt was set
        sequences.append(SequenceResult(i, worker_of(config, i), prompt, tokens, decode(tokens), i in collected.done))
    for beams in collected.beams.values():  # beam modes: every beam's text too
        beams["texts"] = [decode(t) for t in beams["tokens"]]
    metrics, os_metrics = measure(config, collected)
    return RunRecord(config, sequences, metrics, collected, status, error, os_metrics=os_metrics,
                     provenance=provenance)


def worker_of(config: RunConfig, seq: int) -> int:
    """The draft worker (numbered inside the job) that drafts sequence ``seq``: its own in seed mode, the
    single one in sd, the first of its beams' in dsbd. The one place this rule is written."""
    return {"seed": seq, "dsbd": seq * config.beam.slots_at_start}.get(config.mode, 0)


def measure(config: RunConfig, collected: Collected) -> tuple[Metrics, OsMetrics]:
    """The run's metrics from what the children reported; a replayed trace goes through here too."""
    committed = sum(len(t) for t in collected.tokens.values())
    metrics = compute(collected.events, collected.counters, committed, collected.started)
    per_worker: dict[int, int] = {}
    for seq, tokens in collected.tokens.items():
        w = worker_of(config, seq)
        per_worker[w] = per_worker.get(w, 0) + len(tokens)
    return metrics, measure_os(collected.events, per_worker)


def record_kind(data: object) -> str | None:
    """What a JSON file of specsched's holds: "run" (one run's record or trace: config, sequences), "tree" (a
    Tree-of-Thoughts record: config, trees), "several" (compare and workload records hold runs by policy,
    bench records by arm), or None (none of those)."""
    if not isinstance(data, dict):
        return None
    if "events" not in data and ("policies" in data or "arms" in data):
        return "several"
    if isinstance(data.get("config"), dict) and isinstance(data.get("trees"), list):
        return "tree"
    if isinstance(data.get("config"), dict) and isinstance(data.get("sequences"), list):
        return "run"
    return None
