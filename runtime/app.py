"""One run, start to finish: validate -> tokenise -> supervise the processes -> a record of results.

Everything that can be checked before a process starts is checked here (policy, backend pair,
prompts), so bad input costs one line and no process. What was verified before a failure or a
Ctrl-C is still returned: the record says ``status`` and keeps every committed token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specsched.policies.loader import load_policy
from specsched.runtime.config import RunConfig
from specsched.runtime.metrics import Metrics, compute
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

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "error": self.error,
            "config": self.config.to_dict(),
            "sequences": [s.__dict__ for s in self.sequences],
            "metrics": self.metrics.to_json(),
            "counters": self.collected.counters,
            "events": [e.to_json() for e in sorted(self.collected.events, key=lambda e: e.start)],
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
    backend, tokenizer, prompts = prepare(config)
    supervisor = Supervisor(config, prompts, on_update=on_update)
    status, error = "ok", None
    try:
        collected = supervisor.run()
    except RunFailed as exc:
        status, error, collected = "failed", str(exc), supervisor.collected
    except (KeyboardInterrupt, Interrupted):
        status, error, collected = "interrupted", "interrupted", supervisor.collected
    committed = sum(len(t) for t in collected.tokens.values())
    metrics = compute(collected.events, collected.counters, committed, collected.started)
    sequences = []
    for i in range(config.n_sequences):
        tokens = collected.tokens.get(i, [])
        worker = i if config.mode == "seed" else 0
        sequences.append(SequenceResult(i, worker, config.prompt_for(i), tokens,
                                        tokenizer.decode(tokens), i in collected.done))
    return RunRecord(config, sequences, metrics, collected, status, error)
