"""Recorded runs: ``--trace PATH`` saves everything a run produced; ``replay`` plays it back.

A trace is the ``--json`` record plus a ``trace`` section with what the supervisor saw on its own
clock: when it started, the process ids, when each commit arrived, and the CPU / memory samples.
Replaying feeds those into the same view at any speed, and recomputes the metrics from the events
with the same function a live run uses (``app.measure``), so they come out exactly as recorded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...core.config import ConfigError, RunConfig
from ...core.events import Event
from ...engine.collected import Collected
from ...engine.record import RunRecord, SequenceResult, measure, record_kind

TRACE_VERSION = 1
_EVENT_FIELDS = ("pid", "role", "worker", "kind", "start", "end", "seq", "job", "admitted")
_OPTIONAL = {"job": -1, "admitted": None}  # fields older records lack


class TraceError(ConfigError):
    """A file that is not a readable trace: one line, exit status 2."""


def trace_json(record: RunRecord, usage: list[list] | None = None) -> dict:
    c = record.collected
    return {**record.to_json(), "trace": {
        "version": TRACE_VERSION, "started": c.started, "finished": c.finished,
        "processes": c.processes, "done": sorted(c.done), "verifier_finished": c.verifier_finished,
        "commits": [list(x) for x in c.commits], "usage": list(usage or []),
    }}


def write_trace(record: RunRecord, path: str | Path, usage: list[list] | None = None) -> None:
    Path(path).write_text(json.dumps(trace_json(record, usage)))


@dataclass
class Trace:
    data: dict
    record: RunRecord           # rebuilt from the file, its metrics recomputed from the events

    @property
    def usage(self) -> list[list]:
        return self.data.get("trace", {}).get("usage", [])

    def reproduced(self) -> bool:
        """Do the recomputed metrics equal the recorded ones, number for number?"""
        again = json.loads(json.dumps(self.record.to_json()))
        return (again["metrics"] == self.data["metrics"]
                and again.get("os_metrics") == self.data.get("os_metrics"))


def load_events(path: str | Path) -> tuple[dict, list[Event]]:
    """The events of a trace or of a ``--json`` record (all that ``export`` needs)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
        if record_kind(data) in ("several", "tree"):
            raise TraceError(f"{path} is a compare, bench, workload or tree record: it holds several runs, and "
                             "this reads one run's record (`specsched run --json` or `--trace`)")
        events = [Event.from_row([e.get(k, _OPTIONAL[k]) if k in _OPTIONAL else e[k] for k in _EVENT_FIELDS])
                  for e in data["events"]]
        # every reader titles its output with the config and counts each sequence's tokens
        if not (isinstance(data["config"], dict) and all(isinstance(s["id"], int) and isinstance(s["tokens"], list)
                                                         for s in data["sequences"])):
            raise TypeError("its config or sequences are not what a record holds")
    except TraceError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"{path}: not a specsched record ({type(exc).__name__}: {exc})") from None
    for i, e in enumerate(events):  # an edited or damaged file: its charts and metrics would be nonsense
        if not e.end >= e.start:
            raise TraceError(f"{path}: event {i} ({e.role} {e.kind}) ends at {e.end} before it starts at {e.start}")
    return data, events


def load_trace(path: str | Path) -> Trace:
    data, events = load_events(path)
    t = data.get("trace")
    if isinstance(t, dict) and t.get("version") != TRACE_VERSION:
        raise TraceError(f"{path}: a trace of version {t.get('version')!r}; this version of specsched reads version "
                         f"{TRACE_VERSION}")
    if not isinstance(t, dict):
        raise TraceError(f"{path}: no trace section (version {TRACE_VERSION}); record one with "
                         "`specsched run --trace PATH`")
    config = RunConfig.from_dict(data["config"])
    try:
        return Trace(data, _record(data, t, config, events))
    except ConfigError:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # a field missing or of the wrong type: a damaged file
        raise TraceError(f"{path}: not a specsched trace ({type(exc).__name__}: {exc})") from None


def _record(data: dict, t: dict, config: RunConfig, events: list[Event]) -> RunRecord:
    """The run a trace recorded, its metrics recomputed from its events."""
    collected = Collected(
        tokens={s["id"]: list(s["tokens"]) for s in data["sequences"]}, done=set(t["done"]),
        events=events, counters=dict(data.get("counters") or {}),
        cost_curve=data.get("cost_curve"), calibration=dict(data.get("calibration") or {}),
        verifier_threads=dict(data.get("verifier_threads") or {}),
        verifier_finished=bool(t["verifier_finished"]), started=float(t["started"]),
        finished=float(t["finished"]), processes=dict(t["processes"]),
        commits=[(float(a), int(b), int(n)) for a, b, n in t["commits"]], marks=marks_of(data),
        rejected_telemetry=int(data.get("rejected_telemetry", 0)), restarts=list(data.get("restarts") or []),
        refused_handshakes=int(data.get("refused_handshakes", 0)), hosts=dict(data.get("hosts") or {}),
        devices=dict(data.get("devices") or {}))
    sequences = [SequenceResult(**s) for s in data["sequences"]]
    metrics, os_metrics = measure(config, collected)
    return RunRecord(config, sequences, metrics, collected, data["status"], data.get("error"),
                     os_metrics=os_metrics, provenance=data.get("provenance"))


def marks_of(data: dict) -> list[tuple[float, int, str]]:
    """A record's process marks (dsbd workers forking into and exiting beam slots), as ``Collected`` holds them."""
    try:
        return [(float(t), int(w), str(k)) for t, w, k in data.get("process_marks") or []]
    except (TypeError, ValueError) as exc:
        raise TraceError(f"not a specsched record: process_marks ({type(exc).__name__}: {exc})") from None


class ReplayClock:
    """The recorded run's monotonic time during a replay, ``speed`` times faster than real time."""

    def __init__(self, trace: Trace, speed: float = 1.0) -> None:
        if not speed > 0:
            raise TraceError(f"--speed must be positive, got {speed}")
        rec = trace.record.collected
        self.start, self.speed = rec.started, speed
        self.end = max([rec.finished, *(e.end for e in rec.events)])
        self._wall0 = time.monotonic()

    def __call__(self) -> float:
        return min(self.start + (time.monotonic() - self._wall0) * self.speed, self.end)


def replay(trace: Trace, update: Callable[[Collected], None], clock: ReplayClock, *,
           tick: float = 0.05, sleep: Callable[[float], None] = time.sleep) -> None:
    """Feed the recorded run to ``update`` as the live run fed its view: each event once it has
    ended, each commit when it arrived; at the end, the final counters and texts."""
    rec = trace.record.collected
    events = sorted(rec.events, key=lambda e: e.end)
    commits = sorted(rec.commits)
    last_commit = {seq: t for t, seq, _ in commits}
    feed = Collected(started=rec.started, processes=rec.processes)
    i = j = 0
    while True:
        now = clock()
        while i < len(events) and events[i].end <= now:
            feed.events.append(events[i])
            i += 1
        while j < len(commits) and commits[j][0] <= now:
            t, seq, _ = commits[j]
            feed.commits.append(commits[j])
            if seq in rec.done and last_commit[seq] == t:
                feed.done.add(seq)
            j += 1
        feed.marks = [m for m in rec.marks if m[0] <= now]
        if now >= clock.end:
            break
        update(feed)
        sleep(tick)
    feed.tokens, feed.counters, feed.done = rec.tokens, rec.counters, rec.done
    feed.verifier_finished, feed.finished, feed.marks = rec.verifier_finished, rec.finished, rec.marks
    update(feed)
