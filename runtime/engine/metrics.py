"""Run metrics, computed from what the children reported.

Timing is over the decode window - from the first recorded event to the last - so model loading
and process start-up (reported separately as ``startup_s``) do not blur the comparison of modes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from ..core.events import Event


@dataclass(slots=True)
class Metrics:
    wall_s: float
    tokens_per_s: float
    acceptance_rate: float | None      # accepted draft tokens / drafted tokens (None without drafts)
    mean_tokens_per_verify: float      # committed tokens / target forwards
    verifier_busy: float               # share of the window the target model was computing
    tokens: int
    verifications: int
    drafted: int
    accepted: int
    startup_s: float
    rejected_messages: int
    waiting_s: dict[int, float] = field(default_factory=dict)  # per worker: time queued

    def to_json(self) -> dict:
        d = asdict(self)
        d["waiting_s"] = {str(k): v for k, v in self.waiting_s.items()}
        return d


def compute(events: list[Event], counters: dict, committed_tokens: int, started: float) -> Metrics:
    if events:
        t0 = min(e.start for e in events)
        t1 = max(e.end for e in events)
    else:
        t0 = t1 = started
    window = t1 - t0
    # fsum is exactly rounded, so the result does not depend on the order the events arrived in:
    # a replayed trace reproduces these numbers bit for bit.
    busy = math.fsum(e.duration for e in events if e.role == "verifier" and e.kind in ("verify", "resample"))
    queued: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e.role == "draft" and e.kind == "queued":
            queued[e.worker].append(e.duration)
    waiting = {w: math.fsum(d) for w, d in queued.items()}
    drafted = int(counters.get("drafted", 0))
    accepted = int(counters.get("accepted", 0))
    verifications = int(counters.get("verifications", 0))
    return Metrics(
        wall_s=window,
        tokens_per_s=committed_tokens / window if window > 0 else 0.0,
        acceptance_rate=accepted / drafted if drafted else None,
        mean_tokens_per_verify=committed_tokens / verifications if verifications else 0.0,
        verifier_busy=min(busy / window, 1.0) if window > 0 else 0.0,
        tokens=committed_tokens,
        verifications=verifications,
        drafted=drafted,
        accepted=accepted,
        startup_s=max(t0 - started, 0.0),
        rejected_messages=int(counters.get("rejected_messages", 0)),
        waiting_s=dict(sorted(waiting.items())),
    )
