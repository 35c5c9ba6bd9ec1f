"""What a job's processes reported, and the ways a job can end other than well.

Everything committed is final even if the job then fails: the record keeps it (nothing verified is lost).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.events import Event


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that teardown runs (like KeyboardInterrupt; exit status 143)."""


@dataclass
class Collected:
    tokens: dict[int, list[int]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    cost_curve: list | None = None   # the verifier's fitted forward cost at the job's end (CostCurve.to_list)
    calibration: dict = field(default_factory=dict)  # acceptance by draft-confidence bin (runtime/core/calibration.py)
    verifier_threads: dict = field(default_factory=dict)  # threads -> [forwards, seconds] (scheduler/cores.py)
    beams: dict = field(default_factory=dict)  # beam modes: sequence -> {"tokens": [...], "logprobs": [...]}
    verifier_finished: bool = False
    rejected_telemetry: int = 0
    refused_handshakes: int = 0      # tcp: peers without the run's key, refused (runtime/core/gatekeeper.py)
    hosts: dict[str, str] = field(default_factory=dict)  # child name -> host, for workers on other hosts
    started: float = 0.0
    finished: float = 0.0
    processes: dict[str, int] = field(default_factory=dict)   # child name -> pid, for the live view
    threads: dict[str, int] = field(default_factory=dict)     # child name -> torch threads it was given
    devices: dict[str, dict] = field(default_factory=dict)    # child name -> {"device", "asked"} it reported
    commits: list[tuple[float, int, int]] = field(default_factory=list)  # (received, seq, n tokens)
    states: dict[str, str] = field(default_factory=dict)      # child name -> its process-table state now
    marks: list[tuple[float, int, str]] = field(default_factory=list)  # (when, worker, "fork" | "exit" | "restart")
    restarts: list[dict] = field(default_factory=list)  # a worker restarted: who, when, why (engine/supervisor.py)
