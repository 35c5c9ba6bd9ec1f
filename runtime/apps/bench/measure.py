"""Repeated, interleaved measurement of every arm; medians, spreads and ratios against serial AR.

Runs go in a fixed interleaved order - arm 1, arm 2, ..., arm 1, arm 2, ... - so slow drift in the
machine's load (a background job, thermal throttling) hits every arm alike instead of whichever arm
ran last. The first ``warmup`` rounds are discarded. Every ratio divides medians measured in the same
invocation:

    speedup_vs_ar = median tokens/s of the arm / median tokens/s of ``ar``

and, greedy only, ``outputs_match_ar`` says every sequence of every successful measured run equals
``ar``'s. A failed run is excluded from the statistics and reported with its error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...engine.collected import Interrupted
from ...engine.stopping import stopped_by
from .cpu import tree_cpu_seconds

BASELINE = "ar"


@dataclass(slots=True)
class Sample:
    """One timed run of one arm."""

    tokens_per_s: float
    wall_s: float
    tokens: list[list[int]]                       # generated tokens per sequence, in sequence order
    acceptance_rate: float | None = None          # None: the arm drafts nothing, or cannot count it
    mean_tokens_per_verify: float | None = None
    verifier_busy: float | None = None
    overhead: float | None = None                 # runtime overhead / verifier busy time
    draft_size: float | None = None               # draft tokens per verified draft (a tree's nodes)
    aside_share: float | None = None              # share of the tokens decoded while stepped aside
    cost_curve: list | None = None                # the verifier's fitted forward cost (CostCurve.to_list)
    cpu_s_per_token: float | None = None          # CPU seconds of every process of the run per token (cpu.py)
    gpu_sm_percent: float | None = None           # SM % of the run's processes together (NVML; None: no GPU)
    gpu_busy_percent: float | None = None         # % of time the run's GPU ran kernels (NVML; MPS too)
    error: str | None = None                      # a failed run: excluded from every statistic


class Arm(Protocol):
    name: str
    description: str
    skipped: str | None                           # why this arm cannot run here, or None

    def run(self) -> Sample: ...


@dataclass(slots=True)
class ArmResult:
    name: str
    description: str
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str | None = None
    speedup_vs_ar: float | None = None
    outputs_match_ar: bool | None = None          # None: sampled, skipped, every run failed, or no ar
    mismatched: list[int] = field(default_factory=list)   # sequence ids that differ from ar

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.error is None]

    def median(self, metric: str) -> float | None:
        values = [getattr(s, metric) for s in self.ok if getattr(s, metric) is not None]
        return statistics.median(values) if values else None

    def spread(self, metric: str = "tokens_per_s") -> tuple[float, float] | None:
        values = [getattr(s, metric) for s in self.ok if getattr(s, metric) is not None]
        return (min(values), max(values)) if values else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.median("tokens_per_s")

    def to_json(self) -> dict:
        spread = self.spread()
        return {
            "name": self.name,
            "description": self.description,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_min": spread[0] if spread else None,
            "tokens_per_s_max": spread[1] if spread else None,
            "speedup_vs_ar": self.speedup_vs_ar,
            "acceptance_rate": self.median("acceptance_rate"),
            "mean_tokens_per_verify": self.median("mean_tokens_per_verify"),
            "verifier_busy": self.median("verifier_busy"),
            "overhead": self.median("overhead"),
            "draft_size": self.median("draft_size"),
            "aside_share": self.median("aside_share"),
            "wall_s": self.median("wall_s"),
            "cpu_s_per_token": self.median("cpu_s_per_token"),
            "gpu_sm_percent": self.median("gpu_sm_percent"),
            "gpu_busy_percent": self.median("gpu_busy_percent"),
            "outputs_match_ar": self.outputs_match_ar,
            "mismatched_sequences": self.mismatched,
            "skipped": self.skipped,
            "errors": self.errors,
            "runs": [{k: getattr(s, k) for k in Sample.__slots__ if k != "tokens"} for s in self.samples],
        }


@dataclass(slots=True)
class Stop:
    """Where a signal stopped the benchmark: the runs measured until then are kept (their medians reported)."""

    signal: str | None = None   # "SIGINT" (Ctrl-C) or "SIGTERM" once stopped
    at: str = ""                # the run it cut short: "repeat 2/5 · seed-fcfs"

    def caught(self, exc: BaseException) -> None:
        self.signal = stopped_by(exc)[0]


def measure(arms: Sequence[Arm], *, warmup: int, repeats: int, greedy: bool,
            progress: Callable[[str], None] | None = None, uncompared: frozenset[str] = frozenset(),
            stop: Stop | None = None) -> list[ArmResult]:
    """Run every arm ``warmup + repeats`` times, interleaved; compare each with ``ar`` (but ``uncompared``:
    arms that compute the target with other numerics than ``ar``'s, whose outputs prove nothing). Ctrl-C or
    SIGTERM ends the measuring: the run it cut short is dropped, the others are kept and ``stop`` says where."""
    results = [ArmResult(a.name, a.description, skipped=a.skipped) for a in arms]
    active = [(a, r) for a, r in zip(arms, results) if a.skipped is None]
    stop = stop if stop is not None else Stop()
    try:
        _measure_rounds(active, warmup, repeats, progress, stop)
    except (KeyboardInterrupt, Interrupted) as exc:
        stop.caught(exc)
    compare_with_baseline(results, greedy=greedy, uncompared=uncompared)
    return results


def _measure_rounds(active: list[tuple[Arm, ArmResult]], warmup: int, repeats: int,
                    progress: Callable[[str], None] | None, stop: Stop) -> None:
    for i in range(warmup + repeats):
        label = f"warm-up {i + 1}/{warmup}" if i < warmup else f"repeat {i - warmup + 1}/{repeats}"
        for arm, result in active:
            stop.at = f"{label} · {arm.name}"
            if progress:
                progress(stop.at)
            try:
                cpu = tree_cpu_seconds()
                sample = arm.run()
                tokens = sum(len(t) for t in sample.tokens)
                sample.cpu_s_per_token = (tree_cpu_seconds() - cpu) / tokens if tokens else None
            except Exception as exc:  # one broken arm must not lose the others' measurements
                sample = Sample(0.0, 0.0, [], error=f"{type(exc).__name__}: {exc}")
            if sample.error:
                result.errors.append(f"{label}: {sample.error}")
            if i >= warmup:
                result.samples.append(sample)


# Greedy beam arms decode by beam search, not by one argmax a step: their reference is `beam`, not `ar`
REFERENCE = {"beam": None, "dsbd": "beam"}


def compare_with_baseline(results: list[ArmResult], *, greedy: bool,
                          uncompared: frozenset[str] = frozenset()) -> None:
    """Fill ``speedup_vs_ar`` and (greedy) ``outputs_match_ar`` / ``mismatched`` of every arm (beam arms:
    against ``beam``, see REFERENCE)."""
    by_name = {r.name: r for r in results}
    base = by_name.get(BASELINE)
    base_rate = base.tokens_per_s if base else None
    for r in results:
        rate = r.tokens_per_s
        r.speedup_vs_ar = rate / base_rate if rate is not None and base_rate else None
        r.outputs_match_ar, r.mismatched = None, []
        ref = by_name.get(REFERENCE.get(r.name, BASELINE))
        reference = ref.ok[0].tokens if ref is not None and ref.ok else None
        if not greedy or reference is None or not r.ok or r.name in uncompared:
            continue
        # failed runs are reported as failures (errors), not compared: a partial output is no
        # evidence about losslessness
        differ = {seq for s in r.ok for seq in _differing(s.tokens, reference)}
        r.mismatched = sorted(differ)
        r.outputs_match_ar = not differ


def _differing(tokens: list[list[int]], reference: list[list[int]]) -> list[int]:
    n = max(len(tokens), len(reference))
    padded = tokens + [[]] * (n - len(tokens))
    return [i for i in range(n) if i >= len(reference) or padded[i] != reference[i]]


def mismatches(results: list[ArmResult]) -> list[ArmResult]:
    """Arms whose greedy output differs from ``ar``'s: a losslessness bug, to be reported loudly."""
    return [r for r in results if r.outputs_match_ar is False]
