"""One run, start to finish: validate -> tokenise -> supervise the processes -> a record of results.

Everything that can be checked before a process starts is checked here (policy, backend pair,
prompts), so bad input costs one line and no process. What was verified before a failure or a
Ctrl-C is still returned: the record says ``status`` and keeps every committed token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specsched.policies.loader import load_policy
from specsched.runtime.config import RunConfig
from specsched.runtime.metrics import Metrics, compute
from specsched.runtime.osmetrics import OsMetrics
from specsched.runtime.osmetrics import measure as measure_os
from specsched.runtime.provenance import provenance
from specsched.runtime.supervisor import Collected, Interrupted, RunFailed, Supervisor
from specsched.workers.backend import get_backend


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
    provenance: dict | None = None  # what produced it: runtime/provenance.py

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "error": self.error,
            "config": self.config.to_dict(),
            "sequences": [s.__dict__ for s in self.sequences],
            "metrics": self.metrics.to_json(),
            "counters": self.collected.counters,
            "events": [e.to_json() for e in sorted(self.collected.events, key=lambda e: e.start)],
            **({"os_metrics": self.os_metrics.to_json()} if self.os_metrics else {}),
            "provenance": self.provenance,
            **self.extra,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))


def prepare(config: RunConfig):
    """Checks that need no process; returns the backend and the tokenised prompts."""
    load_policy(config.policy)
    backend = get_backend(config)
    backend.check()
    if not config.prompts:
        config.prompts = [backend.default_prompt()]
        RunConfig.__post_init__(config)
    tokenizer = backend.tokenizer()
    prompts = [tokenizer.encode(config.prompt_for(i), chat=not config.raw_prompt)
               for i in range(config.n_sequences)]
    return backend, tokenizer, prompts


def run(config: RunConfig, on_update=None) -> RunRecord:
    try:
        backend, tokenizer, prompts = prepare(config)
    except KeyboardInterrupt:  # Ctrl-C while models load: no process started, but --json still says so
        return record(config, Collected(), "interrupted", "interrupted (Ctrl-C) before any process started")
    supervisor = Supervisor(config, prompts, on_update=on_update)
    status, error = "ok", None
    try:
        collected = supervisor.run()
    except RunFailed as exc:
        status, error, collected = "failed", str(exc), supervisor.collected
    except KeyboardInterrupt:
        status, error, collected = "interrupted", "interrupted (Ctrl-C)", supervisor.collected
    except Interrupted:
        status, error, collected = "interrupted", "interrupted (SIGTERM)", supervisor.collected
    return record(config, collected, status, error, tokenizer.decode)


def record(config: RunConfig, collected: Collected, status: str, error: str | None,
           decode: Callable[[list[int]], str] = lambda tokens: "") -> RunRecord:
    """What a run leaves: each sequence's committed tokens and text, and the metrics of what was reported."""
    sequences = []
    for i in range(config.n_sequences):
        tokens = collected.tokens.get(i, [])
        prompt = config.prompt_for(i) if config.prompts else ""  # interrupted before the default prompt was set
        sequences.append(SequenceResult(i, worker_of(config, i), prompt, tokens, decode(tokens), i in collected.done))
    metrics, os_metrics = measure(config, collected)
    return RunRecord(config, sequences, metrics, collected, status, error, os_metrics=os_metrics,
                     provenance=provenance(config, collected.threads))


def worker_of(config: RunConfig, seq: int) -> int:
    """The draft worker that drafts sequence ``seq``: its own in seed mode, the single one in sd."""
    return seq if config.mode == "seed" else 0


def measure(config: RunConfig, collected: Collected) -> tuple[Metrics, OsMetrics]:
    """The run's metrics from what the children reported; a replayed trace goes through here too."""
    committed = sum(len(t) for t in collected.tokens.values())
    metrics = compute(collected.events, collected.counters, committed, collected.started)
    per_worker: dict[int, int] = {}
    for seq, tokens in collected.tokens.items():
        w = worker_of(config, seq)
        per_worker[w] = per_worker.get(w, 0) + len(tokens)
    return metrics, measure_os(collected.events, per_worker)
