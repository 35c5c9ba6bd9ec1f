"""Timeline events: what every process was doing, and when, on the shared monotonic clock.

``time.monotonic()`` reads CLOCK_MONOTONIC, which is one clock for every process on the machine,
so events recorded in different processes line up on one timeline.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Literal

from .transport import wire_pid

Role = Literal["verifier", "draft"]
# draft: a worker runs its draft model; queued: its draft waits in the run queue;
# verify: the target model checks a draft; resample: the verifier samples after a rejection;
# idle: the verifier has nothing to verify.
Kind = Literal["draft", "queued", "verify", "resample", "idle"]
KINDS: tuple[Kind, ...] = ("draft", "queued", "verify", "resample", "idle")
VERIFIER = -1  # the worker id recorded for the verifier's own events


@dataclass(frozen=True, slots=True)
class Event:
    pid: int
    role: Role
    worker: int
    kind: Kind
    start: float
    end: float
    seq: int = -1
    job: int = -1          # the job it served, when the process knows and it was one job (the verifier)
    # a worker's "queued" event: when the verifier took the draft into its run queue, on its own clock (start is
    # when the worker sent it; the time between is transit, which no policy decides). None: not known
    admitted: float | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_row(self) -> list:
        row = [self.pid, self.role, self.worker, self.kind, self.start, self.end, self.seq, self.job]
        return row if self.admitted is None else [*row, self.admitted]

    @classmethod
    def from_row(cls, row: list) -> Event:
        # older traces have no job column; only a queued event with the verifier's stamp has an admitted one
        pid, role, worker, kind, start, end, seq, *rest = row
        if role not in ("verifier", "draft") or kind not in KINDS or len(rest) > 2:
            raise ValueError(f"bad event row {row!r}")
        job = int(rest[0]) if rest else -1
        admitted = float(rest[1]) if len(rest) > 1 and rest[1] is not None else None
        return cls(int(pid), role, int(worker), kind, float(start), float(end), int(seq), job, admitted)

    def to_json(self) -> dict:
        d = asdict(self)
        if self.admitted is None:  # only queued events carry it: records stay as small as they were
            del d["admitted"]
        return d


class Recorder:
    """Collects one process's events; ``drain`` hands them over for sending."""

    def __init__(self, role: Role, worker: int) -> None:
        self.role: Role = role
        self.worker = worker
        self.pid = wire_pid()
        self._events: list[Event] = []

    def add(self, kind: Kind, start: float, end: float, seq: int = -1, job: int = -1,
            admitted: float | None = None) -> None:
        if end > start:
            self._events.append(Event(self.pid, self.role, self.worker, kind, start, end, seq, job, admitted))

    def span(self, kind: Kind, seq: int = -1) -> _Span:
        return _Span(self, kind, seq)

    def drain(self) -> list[list]:
        rows = [e.to_row() for e in self._events]
        self._events.clear()
        return rows


class _Span:
    """``with recorder.span("draft"):`` records the block's wall interval."""

    def __init__(self, recorder: Recorder, kind: Kind, seq: int) -> None:
        self.recorder, self.kind, self.seq = recorder, kind, seq

    def __enter__(self) -> _Span:
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.recorder.add(self.kind, self.start, time.monotonic(), self.seq)
