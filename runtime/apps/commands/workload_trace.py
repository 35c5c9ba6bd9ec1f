"""A workload's jobs as one recorded run: `specsched run --arrivals ... --trace PATH` (or `--workload`).

Each job of a workload has a record of its own, its sequences and workers numbered inside it. The trace puts
them on one timeline as one --mode seed run of every job's sequences: job j's sequence i becomes sequence
``first_seq`` + i, and its worker row the same number (one worker per sequence), so `replay`, `export` and
`whatif` read it as they read any run. Its ``workload`` section says which sequences were whose, and each
job's arrival, priority, deadline and budget (what whatif's policies see), with the job's own metrics.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ...core.config import ConfigError, Mode, RunConfig
from ...core.config_checks import MAX_SEQUENCES
from ...core.events import Event
from ...engine.collected import Collected
from ...engine.provenance import provenance
from ...engine.record import RunRecord, SequenceResult, measure
from ..run.trace import write_trace
from .workload import WorkloadJob, job_config, job_metrics


def check_traceable(config: RunConfig, jobs: list[WorkloadJob]) -> None:
    """A workload --trace records: --mode seed jobs (a worker per sequence), at most a job's sequences in all."""
    if config.mode != Mode.SEED:
        raise ConfigError(f"--trace records a workload of --mode seed jobs (a worker per sequence); this one is "
                          f"--mode {config.mode}: use --json")
    total = sum(job_config(config, job, i).n_sequences for i, job in enumerate(jobs))
    if total > MAX_SEQUENCES:
        raise ConfigError(f"--trace records a workload as one run of at most {MAX_SEQUENCES:,} sequences; "
                          f"this one has {total:,}: use --json")


def write_workload_trace(path: str, config: RunConfig, jobs: list[WorkloadJob], records: list[RunRecord]) -> None:
    write_trace(merged(config, jobs, records), path)


def merged(config: RunConfig, jobs: list[WorkloadJob], records: list[RunRecord],
           configs: list[RunConfig] | None = None) -> RunRecord:
    """The jobs that arrived (`records`, in workload order) as one run, with the ``workload`` section.
    `configs`: each job's settings as it ran, where the workload's rule (`job_config`) did not make them (a server)."""
    configs = configs or [job_config(config, job, i) for i, job in enumerate(jobs[:len(records)])]
    firsts = [sum(c.n_sequences for c in configs[:i]) for i in range(len(configs))]
    whole = dataclasses.replace(config, prompts=[c.prompt_for(s) for c in configs for s in range(c.n_sequences)] or
                                config.prompts, workers=max(sum(c.n_sequences for c in configs), 1),
                                max_new_tokens=max([c.max_new_tokens for c in configs] or [config.max_new_tokens]),
                                priorities=[], tickets=[])
    collected = Collected(started=min((r.collected.started for r in records), default=0.0),
                          finished=max((r.collected.finished for r in records), default=0.0))
    sequences, verifier, counters = [], [], Counter()
    for record, first in zip(records, firsts):
        c = record.collected
        collected.tokens.update((first + s, list(t)) for s, t in c.tokens.items())
        collected.done.update(first + s for s in c.done)
        collected.commits += [(t, first + s, n) for t, s, n in c.commits]
        collected.events += [_renumbered(e, first) for e in c.events if e.role == "draft"]
        verifier += [_renumbered(e, first) for e in c.events if e.role == "verifier"]
        collected.restarts += c.restarts
        collected.rejected_telemetry += c.rejected_telemetry
        counters.update({k: v for k, v in c.counters.items() if isinstance(v, int)})
        collected.cost_curve = c.cost_curve or collected.cost_curve  # the verifier's fit as the last job left it
        sequences += [SequenceResult(first + s.id, first + s.worker, s.prompt, s.tokens, s.text, s.finished)
                      for s in record.sequences]
    collected.events += _once(verifier)
    collected.commits.sort()
    collected.counters = dict(counters)
    collected.processes = {"verifier": next((e.pid for e in collected.events if e.role == "verifier"), 0),
                           **{f"draft-{e.worker}": e.pid for e in collected.events if e.role == "draft"}}
    collected.verifier_finished = all(r.collected.verifier_finished for r in records)
    failed = next((r for r in records if r.status != "ok"), None)
    metrics, os_metrics = measure(whole, collected)
    record = RunRecord(whole, sequences, metrics, collected, failed.status if failed else "ok",
                       failed.error if failed else None, os_metrics=os_metrics, provenance=provenance(whole))
    record.extra["workload"] = {"started": collected.started, "jobs": [
        {**dataclasses.asdict(m), "started": r.collected.started, "deadline_s": job.deadline,
         "max_new_tokens": c.max_new_tokens, "seed": c.seed, "first_seq": first, "sequences": c.n_sequences,
         "workers": r.extra.get("engine", {}).get("workers"), "status": r.status}
        for job, c, r, first, m in zip(jobs, configs, records, firsts, job_metrics(records))]}
    return record


def _renumbered(e: Event, first: int) -> Event:
    """An event of a job's, in the whole run's numbers: its sequence's, and a worker's row that of its sequence."""
    worker = first + e.worker if e.role == "draft" else e.worker
    return dataclasses.replace(e, worker=worker, seq=first + e.seq if e.seq >= 0 else -1)


def _once(events: list[Event]) -> list[Event]:
    """The verifier's events, each once: a stretch it shared between jobs (idle, a batch across jobs) is in each
    running job's record, cut to that job's life; the earliest start of each is kept."""
    first: dict[tuple, Event] = {}
    for e in events:
        key = (e.pid, e.kind, e.end, e.seq)
        if key not in first or e.start < first[key].start:
            first[key] = e
    return sorted(first.values(), key=lambda e: e.start)
