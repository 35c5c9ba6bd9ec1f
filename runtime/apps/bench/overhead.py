"""Runtime overhead: verifier time spent on neither the target model nor waiting for work.

The verifier's serve loop (scheduler/verifier.py) records three kinds of span, which never overlap:

    idle      from the end of its last reply until the oldest queued draft was received
              (under --lockstep: until the draft that completed the step was received)
    verify    target forward + acceptance + cache rollback + commit bookkeeping
    resample  drawing the replacement after a rejection (split off the end of verify)

Everything else inside the verifier's window - from its first recorded span to its last - is the
runtime's own cost: unpacking and admitting drafts (validation, run-queue insertion), the policy's
pick, serialising and sending each verdict, sending commits and events to the supervisor - and any
time the OS gave the verifier's core to another process in between (on a machine with fewer free
cores than processes this can dominate, e.g. on the sim backend, whose forwards are sleeps). So

    overhead_s = |window| - |union of idle, verify and resample spans|
    overhead   = overhead_s / busy_s,        busy_s = total verify + resample time

(a share of verifier busy time, the issue's unit). What the formula cannot see: the receive call of
the *first* draft of a wake-up ends the idle span (its arrival is stamped after it is received), so
that one receive counts as idle; and the replies after the run's last verification fall outside the
window. Both are microseconds per run. In the target-only modes (ar, parallel) the commit sent per
step sits inside the verify span, so their overhead is only the event hand-off between steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ...core.events import Event

COVERED = ("idle", "verify", "resample")
BUSY = ("verify", "resample")


@dataclass(frozen=True, slots=True)
class Overhead:
    window_s: float      # first verifier span start -> last verifier span end
    covered_s: float     # union of idle / verify / resample spans
    busy_s: float        # verify + resample
    overhead_s: float    # window - covered

    @property
    def share_of_busy(self) -> float | None:
        return self.overhead_s / self.busy_s if self.busy_s > 0 else None


def verifier_overhead(events: Iterable[Event]) -> Overhead:
    mine = [e for e in events if e.role == "verifier"]
    spans = sorted((e.start, e.end) for e in mine if e.kind in COVERED)
    if not spans:
        return Overhead(0.0, 0.0, 0.0, 0.0)
    busy = math.fsum(e.duration for e in mine if e.kind in BUSY)
    window = max(end for _, end in spans) - spans[0][0]
    covered = _union_length(spans)
    return Overhead(window, covered, busy, max(window - covered, 0.0))


def _union_length(spans: list[tuple[float, float]]) -> float:
    """Total length of sorted intervals, overlaps counted once (robust even if spans ever nest)."""
    total, (start, end) = [], spans[0]
    for s, e in spans[1:]:
        if s > end:
            total.append(end - start)
            start, end = s, e
        else:
            end = max(end, e)
    total.append(end - start)
    return math.fsum(total)
