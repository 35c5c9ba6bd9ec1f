"""`run` and `compare` with jobs arriving over time: the commands (workload_cli.py: their flags)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.config import ConfigError, RunConfig
from ...engine.engine import Engine
from ...engine.provenance import provenance
from ...engine.record import RunRecord
from ..run.exits import fail, stopped_status
from ..view.live import choose_view
from ..view.traffic import Traffic, TrafficMonitor
from ..view.usage import UsageSampler
from .workload import (
    JobMetrics,
    Played,
    WorkloadJob,
    job_config,
    job_metrics,
    load_workload,
    play,
    poisson_workload,
)
from .workload_cli import JOBS
from .workload_trace import check_traceable, write_workload_trace


def workload_of(args: argparse.Namespace, config: RunConfig) -> list[WorkloadJob]:
    if args.workload and args.arrivals:
        raise ConfigError("give --workload or --arrivals, not both")
    if args.workload:
        if args.prompts:
            raise ConfigError("--workload brings its own prompts: drop --prompt")
        jobs = load_workload(args.workload)
    else:
        jobs = poisson_workload(args.arrivals, JOBS if args.jobs is None else args.jobs,
                                config.prompts or ["Name three colours."], config.seed)
    for i, job in enumerate(jobs):  # every job's settings checked before any process starts
        job_config(config, job, i)
    if getattr(args, "trace", None):
        check_traceable(config, jobs)
    return jobs


def cmd_run_workload(args: argparse.Namespace, console: Console, config: RunConfig) -> int:
    jobs = workload_of(args, config)
    with Engine(_engine_config(config, jobs), planned=_planned(config, jobs)) as engine:
        engine.start_workers(_pool(jobs, config))
        console.print(Text(f"playing {len(jobs)} jobs under policy {config.policy} …", style="dim"))
        traffic = Traffic(engine)  # the live view: the jobs coming and going on the pool's rows (view/traffic.py)
        monitor = TrafficMonitor(traffic, config, UsageSampler(keep=False), name="workload", whole=True)
        view = choose_view(console, monitor, enabled=not args.no_live)
        with view or contextlib.nullcontext():
            played = play(engine, config, jobs, watch=traffic.watch if view else None,
                          tick=(lambda: view.update(traffic.look())) if view else None)
            traffic.look()  # its last frame: every job as it ended
    records, metrics = played.records, job_metrics(played.records)
    stopped = f" · {played.reason}: {len(records)} of {len(jobs)} jobs had arrived" if played.stopped_by else ""
    console.print(jobs_table(metrics, title=f"jobs · policy {config.policy} · seed {config.seed}{stopped}"))
    if args.json:
        Path(args.json).write_text(json.dumps(_json(config, jobs, {config.policy: (records, metrics)}), indent=1))
    if args.trace and records:
        write_workload_trace(args.trace, config, jobs, records)
    return _status(played, len(jobs))


def cmd_compare_workload(args: argparse.Namespace, console: Console, configs: list[RunConfig]) -> int:
    jobs = workload_of(args, configs[0])
    results: dict[str, tuple[list[RunRecord], list[JobMetrics]]] = {}
    # every job under the first policy; the others differ in scheduling only (policy, priorities, batch): one job each
    planned = _planned(configs[0], jobs) + [(f"{jobs[0].name} under policy {c.policy}", job_config(c, jobs[0], 0))
                                            for c in configs[1:]]
    with Engine(_engine_config(configs[0], jobs), planned=planned) as engine:
        engine.start_workers(_pool(jobs, configs[0]))
        for c in configs:
            console.print(Text(f"playing {len(jobs)} jobs under policy {c.policy} …", style="dim"))
            played = play(engine, c, jobs)
            results[c.policy] = (played.records, job_metrics(played.records))
            if played.stopped_by:  # the engine is closed: the policies after this one are not played
                break
    console.print(response_table(jobs, results, stopped=c.policy if played.stopped_by else None))
    if args.json:
        Path(args.json).write_text(json.dumps(_json(configs[0], jobs, results), indent=1))
    if played.stopped_by:
        return _status(played, len(jobs))
    same, verdict = text_verdict([j.name for j in jobs], {p: recs for p, (recs, _) in results.items()})
    console.print(verdict)
    if not same:
        return 1
    return 0 if all(r.status == "ok" for recs, _ in results.values() for r in recs) else 1


def text_verdict(names: list[str], played: dict[str, list[RunRecord]]) -> tuple[bool, Text]:
    """Whether every job's text is the same under every policy (a policy decides when drafts are verified,
    never what is generated), and the line that says so. A job whose text varies by design
    (RunConfig.why_text_varies) differs as expected, not as a bug."""
    def texts(record: RunRecord) -> list[list[int]]:
        return [q.tokens for q in record.sequences]

    first, *others = played.values()
    differ = [i for i, record in enumerate(first) if any(texts(other[i]) != texts(record) for other in others)]
    bugs = [names[i] for i in differ if not first[i].config.why_text_varies]
    if bugs:
        return False, Text(f"✗ the texts of {', '.join(bugs)} differ between policies: a runtime bug", style="bold red")
    if differ:
        whys = "; ".join(f"{names[i]}: {first[i].config.why_text_varies}" for i in differ)
        return True, Text(f"texts differ between policies, as they may ({whys}); every other job's text is identical",
                          style="yellow")
    return True, Text(f"✓ every job's text is identical across {', '.join(played)}", style="green")


def _status(played: Played, jobs: int) -> int:
    """The exit status of a played workload: 128 + the signal that stopped it (with one line), else 0 if every
    job ended well, else 1."""
    if played.stopped_by:
        fail(f"{played.reason}; {len(played.records)} of {jobs} jobs had arrived: what they verified is shown above")
        return stopped_status(played.stopped_by)
    return 0 if all(r.status == "ok" for r in played.records) else 1


def _planned(config: RunConfig, jobs: list[WorkloadJob]) -> list[tuple[str, RunConfig]]:
    """Every job, for the engine to check against the target's positions before any model loads."""
    return [(job.name, job_config(config, job, i)) for i, job in enumerate(jobs)]


def _pool(jobs: list[WorkloadJob], config: RunConfig) -> int:
    """Workers to start before the first arrival, so that no job's response includes a model load: enough
    for every job at once, up to 16 (beyond that a job may still wait for a worker to come free)."""
    return min(sum(job_config(config, j, 0).draft_workers for j in jobs), 16)


def _engine_config(config: RunConfig, jobs: list[WorkloadJob]) -> RunConfig:
    """The engine's settings; its default job must load (its prompt is the first job's)."""
    return dataclasses.replace(config, prompts=list(jobs[0].prompts), workers=0)


def jobs_table(metrics: list[JobMetrics], *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("job", "arrival", "priority", "tokens", "response", "turnaround", "waiting", "deadline"):
        table.add_column(name, justify="left" if name == "job" else "right")
    for m in metrics:
        met = "—" if m.deadline_met is None else ("met" if m.deadline_met else "MISSED")
        table.add_row(Text(m.name), _s(m.arrival_s), str(m.priority), str(m.tokens), _s(m.response_s),
                      _s(m.turnaround_s), _s(m.waiting_s), met)
    table.add_row("mean", "", "", "", _s(_mean([m.response_s for m in metrics])),
                  _s(_mean([m.turnaround_s for m in metrics])), _s(_mean([m.waiting_s for m in metrics])), "",
                  style="bold", end_section=True)  # no job arrived (a signal came first): no mean, "—"
    return table


def response_table(jobs: list[WorkloadJob], results: dict, *, stopped: str | None = None) -> Table:
    """Each job's response under each policy; `stopped`: the policy a signal cut short (its column says so)."""
    table = Table(title="response time per job (from its arrival), by policy", title_justify="left")
    table.add_column("job")
    table.add_column("arrival", justify="right")
    table.add_column("priority", justify="right")
    for policy in results:
        table.add_column(Text(policy + (" (interrupted)" if policy == stopped else "")), justify="right")
    arrived = max((len(ms) for _, ms in results.values()), default=0)  # all, unless a signal stopped the play
    for i, job in enumerate(jobs[:arrived]):
        table.add_row(Text(job.name), _s(job.arrival), str(job.priority),
                      *(_s(ms[i].response_s if i < len(ms) else None) for _, ms in results.values()))
    for label, key in (("mean response", "response_s"), ("mean turnaround", "turnaround_s"),
                       ("mean waiting", "waiting_s")):
        table.add_row(label, "", "", *(_s(_mean([getattr(m, key) for m in ms])) for _, ms in results.values()),
                      style="bold", end_section=label == "mean response")
    return table


def _json(config: RunConfig, jobs: list[WorkloadJob], results: dict) -> dict:
    return {"provenance": provenance(config), "workload": [dataclasses.asdict(j) for j in jobs],
            "policies": {policy: {"jobs": [dataclasses.asdict(m) for m in ms], "records": [r.to_json() for r in recs]}
                         for policy, (recs, ms) in results.items()}}


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _s(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.3f} s"
