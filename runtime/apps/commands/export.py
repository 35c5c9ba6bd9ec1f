"""`specsched export`: a recorded run as a Chrome trace (Perfetto, chrome://tracing) or an SVG.

Chrome Trace Event Format: one track per process, named by metadata events; every state is a
complete ("X") event with integer microsecond ``ts`` / ``dur`` counted from the run's first event;
the run-queue depth is a counter ("C") track on the verifier, where the queue lives.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from ...core.config import RunConfig
from ...core.events import VERIFIER, Event
from ...engine.collected import Collected
from ..run.trace import marks_of
from ..view.dashboard import Dashboard
from ..view.monitor import Monitor


def _us(t: float, t0: float) -> int:
    # rounding is monotonic, so events that do not overlap in seconds do not overlap in microseconds
    return round((t - t0) * 1e6)


def chrome_trace(events: list[Event], *, names: dict[int, str] | None = None,
                 meta: dict | None = None, marks: list[tuple[float, int, str]] = ()) -> dict:
    """The Trace Event Format document of a run's events. ``names`` maps a pid to its track name;
    ``marks`` (dsbd: a worker forking into or exiting a beam slot) become instant events on its track."""
    t0 = min((e.start for e in events), default=0.0)
    names = dict(names or {})
    tracks: dict[int, list[Event]] = {}
    for e in events:
        tracks.setdefault(e.pid, []).append(e)
        names.setdefault(e.pid, "verifier" if e.worker == VERIFIER else f"draft worker {e.worker}")
    order = sorted(tracks, key=lambda pid: (tracks[pid][0].worker, pid))   # verifier first
    out: list[dict] = []
    for index, pid in enumerate(order):
        track = {"ph": "M", "pid": pid, "tid": pid}
        out += [{**track, "name": "process_name", "args": {"name": names[pid]}},
                {**track, "name": "process_sort_index", "args": {"sort_index": index}},
                {**track, "name": "thread_name", "args": {"name": names[pid]}}]
    clipped = 0
    for pid in order:
        spans, n = _nested([(_us(e.start, t0), _us(e.end, t0), e) for e in tracks[pid]])
        clipped += n
        out += [{"ph": "X", "name": e.kind, "cat": e.role, "ts": a, "dur": b - a, "pid": pid, "tid": pid,
                 "args": {"seq": e.seq, "worker": e.worker}} for a, b, e in spans]
    pid_of = {tracks[pid][0].worker: pid for pid in order}
    out += [{"ph": "i", "s": "t", "name": kind, "cat": "process", "ts": _us(t, t0), "pid": pid_of[w], "tid": pid_of[w]}
            for t, w, kind in marks if w in pid_of]
    verifier = next((pid for pid in order if tracks[pid][0].worker == VERIFIER), order[0] if order else 0)
    out += [{"ph": "C", "name": "run queue", "ts": ts, "pid": verifier, "tid": verifier, "args": {"depth": d}}
            for ts, d in _queue_steps(events, t0)]
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {**(meta or {}), "clock": "CLOCK_MONOTONIC, microseconds from the first event",
                          "clipped_events": clipped}}


def _nested(spans: list[tuple[int, int, Event]]) -> tuple[list[tuple[int, int, Event]], int]:
    """Spans on one track, each either inside the one before or after it (what viewers require).

    A process records its states one after another, so this only ever trims a clock hiccup: a
    span that starts inside another but ends after it begins where the other ends.
    """
    spans = sorted(spans, key=lambda s: (s[0], -s[1]))
    out: list[tuple[int, int, Event]] = []
    open_ends: list[int] = []      # ends of the spans that enclose the current point, innermost last
    clipped = 0
    for a, b, e in spans:
        trimmed = False
        while True:
            while open_ends and open_ends[-1] <= a:
                open_ends.pop()
            if not open_ends or b <= open_ends[-1]:
                break
            a, trimmed = open_ends[-1], True
        clipped += trimmed
        if b < a:
            continue
        out.append((a, b, e))
        open_ends.append(b)
    return out, clipped


def _queue_steps(events: list[Event], t0: float) -> list[tuple[int, int]]:
    """(ts, depth) at every change of the run-queue depth, from the workers' queued events."""
    waits = [e for e in events if e.kind == "queued" and e.end > e.start]
    changes = sorted([(_us(e.start, t0), 1) for e in waits] + [(_us(e.end, t0), -1) for e in waits])
    steps, depth = [(0, 0)], 0
    for ts, delta in changes:
        depth += delta
        if steps[-1][0] == ts:
            steps[-1] = (ts, depth)
        else:
            steps.append((ts, depth))
    return steps


def write_chrome(data: dict, events: list[Event], path: str | Path) -> None:
    trace = data.get("trace") or {}
    names = {pid: name.replace("-", " worker ") if name.startswith("draft") else name
             for name, pid in (trace.get("processes") or {}).items()}
    config = data.get("config") or {}
    meta = {k: config.get(k) for k in ("mode", "policy", "backend", "k") if k in config}
    Path(path).write_text(json.dumps(chrome_trace(events, names=names, meta=meta, marks=marks_of(data))))


def final_svg(data: dict, events: list[Event], *, width: int = 120, title: str = "specsched") -> str:
    """The whole run's Gantt chart of a record or trace file, as an SVG."""
    trace = data.get("trace") or {}
    collected = Collected(tokens={s["id"]: s["tokens"] for s in data.get("sequences", [])},
                          done={s["id"] for s in data.get("sequences", []) if s.get("finished")},
                          events=events, counters=dict(data.get("counters") or {}), marks=marks_of(data),
                          started=float(trace.get("started", min((e.start for e in events), default=0.0))))
    return chart_svg(RunConfig.from_dict(data["config"]), collected, width=width, title=title)


def chart_svg(config: RunConfig, collected: Collected, *, width: int = 120, title: str = "specsched") -> str:
    """The final Gantt chart through Rich's ``Console(record=True)`` SVG export."""
    monitor = Monitor(config)
    monitor.feed(collected)
    snapshot = monitor.snapshot(collected, max((e.end for e in collected.events), default=0.0), final=True)
    console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor")
    console.print(Dashboard(snapshot, processes=False))
    return console.export_svg(title=title)
