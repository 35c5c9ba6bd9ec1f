"""The record of one `specsched bench` invocation: the workload, every arm's results, the goals, a sweep.

``to_json`` is the machine-readable form (``--json``). Its names are stable: a list ``arms`` of
{name, tokens_per_s, speedup_vs_ar, acceptance_rate, mean_tokens_per_verify, verifier_busy,
outputs_match_ar, ...} and the ``config`` the arms shared.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from ...core.config import RunConfig
from ...engine.provenance import provenance, software
from . import targets
from .arms import shared
from .measure import ArmResult, mismatches
from .sweep import SweepPoint

SCHEMA = "specsched-bench/1"


@dataclass(slots=True)
class BenchRecord:
    config: RunConfig                    # the workload every arm shares (mode/policy vary per arm)
    warmup: int
    repeats: int
    arms: list[ArmResult] = field(default_factory=list)       # the main comparison (empty with --sweep)
    sweep_axis: str | None = None
    sweep: list[SweepPoint] = field(default_factory=list)
    smoke: bool = False
    models_loaded: int = 0               # processes (one model each) the benchmark's engine started
    startup_s: float = 0.0               # starting them (loading every model), before the first arm
    total_s: float = 0.0                 # the whole benchmark, start-up included
    target_type: str | None = None       # llamacpp: the GGUF's weight type; not F32 = greedy flips expected
    mps_daemon: bool | None = None       # on CUDA: whether NVIDIA's MPS daemon ran (None: not on CUDA)
    stopped_by: str | None = None        # "SIGINT" / "SIGTERM": a signal ended it early; the runs before are kept
    stopped_at: str | None = None        # the run it cut short: "repeat 2/5 · seed-fcfs"

    @property
    def exact_target(self) -> bool:
        """Greedy outputs must equal ``ar``'s: an fp32 target. A quantised GGUF's batched kernels flip near-ties,
        and so do bf16 / fp16 forwards, whose batched and one-token sums round differently (docs/lossless.md)."""
        if self.target_type is not None:  # a GGUF target (llamacpp): its weight type; --dtype is the draft's
            return self.target_type == "F32"
        return self.config.model_dtype == "fp32"

    @property
    def target_numerics(self) -> str:
        """The target's weights as the notes name them: "a Q4_1 GGUF", "a bf16 target"."""
        return f"a {self.target_type} GGUF" if self.target_type else f"a {self.config.model_dtype} target"

    @property
    def all_results(self) -> list[ArmResult]:
        return self.arms + [a for p in self.sweep for a in p.arms]

    @property
    def mismatched(self) -> list[ArmResult]:
        return mismatches(self.all_results)

    @property
    def failed(self) -> list[ArmResult]:
        return [a for a in self.all_results if a.errors]

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "config": {**shared(self.config), "warmup": self.warmup, "repeats": self.repeats,
                       "smoke": self.smoke, "arms": [a.name for a in self.arms], "host": host(),
                       "models_loaded": self.models_loaded, "startup_s": self.startup_s,
                       "total_s": self.total_s, "target_type": self.target_type,
                       "mps_daemon": self.mps_daemon},
            "provenance": provenance(self.config, dirty=True),
            "arms": [a.to_json() for a in self.arms],
            "targets": [t.to_json() for t in targets.evaluate(self.arms)] if self.arms else [],
            "target_conditions_differ": targets.condition_differences(self.config),
            "mismatches": [{"arm": a.name, "sequences": a.mismatched} for a in self.mismatched],
            "sweep": {"axis": self.sweep_axis, "points": [p.to_json() for p in self.sweep]} if self.sweep_axis
            else None,
            **({"stopped_by": self.stopped_by, "stopped_at": self.stopped_at} if self.stopped_by else {}),
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def host() -> dict:
    """The short machine summary bench records have always carried; the full story is `provenance`."""
    s = software()
    return {"cpus": os.cpu_count(), "machine": platform.machine(), "python": s["python"],
            "torch": s["versions"]["torch"], "transformers": s["versions"]["transformers"]}
