"""The timeline behind the Gantt chart: one row per process, sampled into equal cells.

Events arrive in batches while the run goes on; ``Timeline`` files each into its process's row and
keeps running totals, so a redraw only looks at the events inside the visible window.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...core.events import VERIFIER, Event

# What a cell can show: the event kinds, plus "unknown" for time the process has not reported yet
# (a worker sends its draft / queued / verify events together, after each verdict). Ties in a cell
# go to the state earlier in this order.
ORDER = ("verify", "resample", "queued", "draft", "idle", "unknown")
_INDEX = {s: i for i, s in enumerate(ORDER)}


@dataclass(frozen=True, slots=True)
class Row:
    """One process's events inside a window, and how far its report reaches (``horizon``)."""

    label: str
    worker: int
    events: tuple[Event, ...]
    horizon: float


@dataclass(frozen=True, slots=True)
class Grid:
    """Rows sampled into cells: ``states[r, i]`` indexes ORDER; on the verifier's row ``seqs[r, i]``
    is the sequence a verify cell is verifying (-1 elsewhere)."""

    states: np.ndarray
    seqs: np.ndarray


def grid(rows: list[Row], start: float, end: float, width: int) -> Grid:
    """Each of ``width`` equal cells of [start, end) shows the state covering most of it."""
    step = (end - start) / width
    n = len(ORDER) * len(rows)
    # cover[r * len(ORDER) + s, i]: how much of row r's cell i (1.0 = all of it) is in state s.
    # An event over [a, b) (in cells) covers part of cell floor(a), all cells in between, and part
    # of cell floor(b): two weighted points plus a run of ones, summed with bincount - the cost
    # grows with the events, not with events x cells.
    cover = np.zeros((n, width))
    seqs = np.full((len(rows), width), -1)
    events = [(r, e) for r, row in enumerate(rows) for e in row.events]
    if events:
        a = np.clip((np.array([e.start for _, e in events]) - start) / step, 0.0, width)
        b = np.clip((np.array([e.end for _, e in events]) - start) / step, 0.0, width)
        where = np.array([r for r, _ in events])
        key = where * len(ORDER) + np.array([_INDEX[e.kind] for _, e in events])
        first, last = np.minimum(a.astype(int), width - 1), np.minimum(b.astype(int), width - 1)
        same = first == last
        # cells first + 1 .. last - 1 are covered whole: +1 at first + 1, -1 at last, then a cumsum
        spans = (~same).astype(float)
        size = n * (width + 1)
        ones = np.bincount(key * (width + 1) + first + 1, weights=spans, minlength=size) - \
            np.bincount(key * (width + 1) + last, weights=spans, minlength=size)
        cover += np.cumsum(ones.reshape(n, width + 1), axis=1)[:, :width]
        head = np.where(same, b - a, first + 1 - a)
        tail = np.where(same, 0.0, b - last)
        cover += np.bincount(key * width + first, weights=head, minlength=n * width).reshape(n, width)
        cover += np.bincount(key * width + last, weights=tail, minlength=n * width).reshape(n, width)
        best: dict[tuple[int, int], float] = {}
        for (r, e), f, g, x, y in zip(events, first.tolist(), last.tolist(), a.tolist(), b.tolist()):
            if e.kind != "verify" or e.worker != VERIFIER:
                continue
            for i in range(f, g + 1):   # whose draft: the verification covering most of the cell
                share = min(y, i + 1) - max(x, i)
                if share > best.get((r, i), 0.0):
                    best[r, i] = share
                    seqs[r, i] = e.seq
    cover = cover.reshape(len(rows), len(ORDER), width)
    # events all end before the horizon, so the uncovered rest of a cell is idle up to the
    # horizon and unknown after it
    left = np.arange(width, dtype=float)
    horizon = np.array([(row.horizon - start) / step for row in rows])
    known = np.clip(horizon[:, None] - left, 0.0, 1.0)
    covered = cover.sum(axis=1)
    cover[:, _INDEX["idle"]] += np.maximum(known - covered, 0.0)
    cover[:, _INDEX["unknown"]] = np.maximum(1.0 - np.maximum(known, covered), 0.0)
    states = cover.argmax(axis=1)  # the first maximum: ties go to the earlier state in ORDER
    return Grid(states, np.where(states == 0, seqs, -1))


class Timeline:
    """Every event so far, filed by process; running totals for the live numbers."""

    def __init__(self, n_workers: int) -> None:
        self.keys = [VERIFIER, *range(n_workers)]
        self._events: dict[int, list[Event]] = {k: [] for k in self.keys}
        self._starts: dict[int, list[float]] = {k: [] for k in self.keys}
        self.origin: float | None = None     # the first event's start: t = 0 of the chart
        self.frontier: float | None = None   # the latest reported moment
        self.busy = 0.0                      # verifier time in verify / resample
        self.verifications = 0               # target forwards
        self.drafts_verified = 0             # drafts they verified (more than forwards when batched)
        self.waiting: dict[int, float] = {w: 0.0 for w in range(n_workers)}
        self.queued_time = 0.0               # integral of the run-queue depth over time

    def add_row(self, key: int) -> None:
        """A row for a process that has not reported yet (a server's new worker), in order of its id."""
        if key not in self._events:
            bisect.insort(self.keys, key)
            self._events[key], self._starts[key] = [], []

    def add(self, events: Iterable[Event]) -> None:
        for e in events:
            self.add_row(e.worker)
            row, starts = self._events[e.worker], self._starts[e.worker]
            if starts and e.start < starts[-1]:   # a process reports in order; stay safe anyway
                i = bisect.bisect_right(starts, e.start)
                row.insert(i, e)
                starts.insert(i, e.start)
            else:
                row.append(e)
                starts.append(e.start)
            self.origin = e.start if self.origin is None else min(self.origin, e.start)
            self.frontier = e.end if self.frontier is None else max(self.frontier, e.end)
            if e.role == "verifier" and e.kind in ("verify", "resample"):
                self.busy += e.duration
                self.verifications += e.kind == "verify"
            elif e.role == "draft" and e.kind == "verify":
                self.drafts_verified += 1
            elif e.role == "draft" and e.kind == "queued":
                self.waiting[e.worker] = self.waiting.get(e.worker, 0.0) + e.duration
                self.queued_time += e.duration

    def forget(self, before: float) -> None:
        """Drop the events that ended before `before` (the running totals keep them): what a view that runs for
        days (a server's) holds stays the size of its window."""
        for k in self.keys:
            events, starts = self._events[k], self._starts[k]
            gone = 0
            while gone < len(events) - 1 and events[gone].end < before:  # a row keeps its last event: its horizon
                gone += 1
            del events[:gone], starts[:gone]

    def last_end(self, key: int) -> float | None:
        row = self._events.get(key)
        return row[-1].end if row else None

    def rows(self, start: float, end: float, horizons: dict[int, float],
             hosts: dict[str, str] | None = None, worker: str = "draft") -> list[Row]:
        """The events of each process that overlap [start, end); a worker on another host is labelled with it.
        `worker`: what a worker row is called (a Self-Draft run's workers hold branches: "branch")."""
        hosts = hosts or {}
        rows = []
        for k in self.keys:
            events, starts = self._events[k], self._starts[k]
            lo = max(bisect.bisect_left(starts, start) - 1, 0)  # the one before may reach into the window
            hi = bisect.bisect_left(starts, end)
            inside = tuple(e for e in events[lo:hi] if e.end > start)
            host = hosts.get(f"draft-{k}")
            label = "verifier" if k == VERIFIER else f"{worker} {k}" + (f" @{host}" if host else "")
            rows.append(Row(label, k, inside, horizons.get(k, start)))
        return rows


def queue_depth(rows: list[Row], start: float, end: float, width: int, known: float) -> list[int]:
    """Most drafts waiting in the run queue at once during each cell, from the queued events;
    -1 for cells after ``known``, where some worker has not reported its latest draft yet."""
    changes = sorted((t, d) for row in rows for e in row.events if e.kind == "queued" and e.end > e.start
                     for t, d in ((e.start, 1), (e.end, -1)))   # at a tie, a departure first
    step = (end - start) / width
    starts = start + step * np.arange(width)
    times = np.array([t for t, _ in changes])
    depth = np.r_[0, np.cumsum([d for _, d in changes])].astype(int)   # depth after k changes
    entering = np.searchsorted(times, starts, side="right")            # changes up to a cell's start
    inside = np.searchsorted(times, starts + step, side="left")         # ... and before its end
    peak = depth[entering]
    for i in np.flatnonzero(inside > entering).tolist():               # cells where it changes
        peak[i] = max(peak[i], depth[entering[i] + 1:inside[i] + 1].max())
    return np.where(starts + step / 2 <= known, peak, -1).tolist()
