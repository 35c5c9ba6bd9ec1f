"""Scheduling metrics the operating-systems way: every draft worker is a job, the verifier the CPU.

Per worker (OSTEP ch. 7, with a job's "run" being the verification of one of its drafts):

- turnaround = last verdict - first draft start        (T_completion - T_arrival)
- waiting    = sum of the times its drafts sat in the run queue
- response   = first verification start - first arrival in the run queue   (T_firstrun - T_arrival)
- service    = verifier time spent on its drafts (verify + resample)

Overall: verifier utilisation (busy / decode window), throughput (tokens / window) and Jain's
fairness index J(x) = (sum x)^2 / (n * sum x^2), which is 1 when every worker gets the same share and
1/n when one worker gets everything, over per-worker verifier time and over per-worker tokens.

Starvation is judged by the textbook *bounded waiting* condition rather than by a time, which
would flag a fair policy on a busy machine: a draft's wait is *bypassed* once for every verification
of another worker's draft that starts while it is in the run queue - from the verifier's own stamp of
when it took the draft in (``Event.admitted``), not from when the worker sent it: a draft still in
transit (a worker descheduled between stamping and sending, a verifier busy before it reads) is no
choice of the policy's. Each worker has at most one draft in the queue, so FCFS and round-robin
bypass a wait at most n - 1 times (every other worker once). A wait bypassed more than
``starvation_bound`` = 2 (n - 1) times - twice what a fair policy can produce - is flagged as
starvation; static priorities that keep serving the urgent workers trip it. The longest single wait
(from the sending: what the worker waited) is reported in seconds beside it.

Sums use ``math.fsum`` (exactly rounded), so the numbers do not depend on the order in which the
events arrived: a replayed trace reproduces them bit for bit.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from ..core.events import Event


def starvation_bound(n_workers: int) -> int:
    """Most bypasses one wait may see before it counts as starvation: twice the FCFS bound n - 1."""
    return 2 * (n_workers - 1)


@dataclass(slots=True)
class WorkerStats:
    worker: int
    turnaround_s: float
    waiting_s: float
    response_s: float
    service_s: float
    tokens: int
    verifications: int
    max_wait_s: float
    max_bypassed: int                  # most verifications of others during one of its waits


@dataclass(slots=True)
class OsMetrics:
    window_s: float
    utilisation: float                 # verifier busy / window
    throughput: float                  # committed tokens / s
    mean_turnaround_s: float | None
    mean_waiting_s: float | None
    mean_response_s: float | None
    jain_service: float | None         # over per-worker verifier time
    jain_tokens: float | None          # over per-worker tokens
    max_wait_s: float                  # the longest single wait in the run queue
    max_wait_worker: int | None
    max_bypassed: int                  # most verifications of other workers during one wait
    max_bypassed_worker: int | None
    starvation_bound: int              # bypasses above this are starvation: 2 (n - 1)
    starved: bool
    workers: list[WorkerStats] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def jain(values: list[float]) -> float | None:
    """Jain's fairness index; None when it is undefined (no workers, or nobody got anything)."""
    squares = math.fsum(x * x for x in values)
    if not values or squares == 0:
        return None
    return math.fsum(values) ** 2 / (len(values) * squares)


def measure(events: list[Event], tokens: dict[int, int]) -> OsMetrics:
    """OS metrics from the timeline events and the committed tokens of each worker."""
    t0 = min((e.start for e in events), default=0.0)
    t1 = max((e.end for e in events), default=0.0)
    window = max(t1 - t0, 1e-9)
    busy = math.fsum(e.duration for e in events if e.role == "verifier" and e.kind in ("verify", "resample"))
    by_worker: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e.role == "draft":
            by_worker[e.worker].append(e)
    # when each worker's drafts began to be verified, to count who was served during a wait
    served = sorted((e.start, e.worker) for e in events if e.role == "draft" and e.kind == "verify")
    workers = [_worker_stats(w, sorted(evs, key=lambda e: (e.start, e.end)), tokens.get(w, 0), served)
               for w, evs in sorted(by_worker.items())]
    longest = max(workers, key=lambda s: s.max_wait_s, default=None)
    bypassed = max(workers, key=lambda s: s.max_bypassed, default=None)
    max_wait = longest.max_wait_s if longest else 0.0
    bound = starvation_bound(len(workers))
    return OsMetrics(
        window_s=window,
        utilisation=min(busy / window, 1.0),
        throughput=sum(tokens.values()) / window,
        mean_turnaround_s=_mean([s.turnaround_s for s in workers]),
        mean_waiting_s=_mean([s.waiting_s for s in workers]),
        mean_response_s=_mean([s.response_s for s in workers]),
        jain_service=jain([s.service_s for s in workers]),
        jain_tokens=jain([float(s.tokens) for s in workers]),
        max_wait_s=max_wait,
        max_wait_worker=longest.worker if longest and max_wait > 0 else None,
        max_bypassed=bypassed.max_bypassed if bypassed else 0,
        max_bypassed_worker=bypassed.worker if bypassed and bypassed.max_bypassed else None,
        starvation_bound=bound,
        starved=bool(bypassed) and bypassed.max_bypassed > bound,
        workers=workers,
    )


def _worker_stats(worker: int, events: list[Event], tokens: int,
                  served: list[tuple[float, int]]) -> WorkerStats:
    waits = [e for e in events if e.kind == "queued"]
    verifies = [e for e in events if e.kind == "verify"]
    first_arrival = waits[0].start if waits else None
    first_run = verifies[0].start if verifies else None
    return WorkerStats(
        worker=worker,
        turnaround_s=(verifies[-1].end - events[0].start) if verifies else 0.0,
        waiting_s=math.fsum(e.duration for e in waits),
        response_s=first_run - first_arrival if first_run is not None and first_arrival is not None else 0.0,
        service_s=math.fsum(e.duration for e in verifies),
        tokens=tokens,
        verifications=len(verifies),
        max_wait_s=max((e.duration for e in waits), default=0.0),
        max_bypassed=max((_bypasses(e, served) for e in waits), default=0),
    )


def _bypasses(wait: Event, served: list[tuple[float, int]]) -> int:
    """Verifications of other workers' drafts that started strictly inside this wait's time in the run queue
    (from the verifier's stamp; a record without one, from the sending)."""
    entered = wait.start if wait.admitted is None else max(wait.admitted, wait.start)
    lo = bisect.bisect_right(served, (entered, math.inf))
    hi = bisect.bisect_left(served, (wait.end, -math.inf))
    return sum(1 for _, w in served[lo:hi] if w != wait.worker)


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None
