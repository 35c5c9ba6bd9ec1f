"""The issue's performance goals, evaluated on a measurement: met or missed, and by how much.

Stated for the CPU, the default model pair, n = 3 thoughts, fp32 - a run under other conditions still
shows them, with the differing conditions named. Goals are reported, never asserted: a missed goal is
a finding, not a failure of the harness. All of them are about the default scheduled arm (seed-fcfs,
what `specsched run` does) and use medians from the same invocation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ...core.config import BackendKind, RunConfig
from ...models.registry import DEFAULT
from .arms import SEED_ARM
from .measure import ArmResult

Results = dict[str, ArmResult]


def _ratio(arm: str, over: str) -> Callable[[Results], float | None]:
    def measured(results: Results) -> float | None:
        a, b = results.get(arm), results.get(over)
        x, y = (a.tokens_per_s if a else None), (b.tokens_per_s if b else None)
        return x / y if x is not None and y else None
    return measured


def _median(arm: str, metric: str) -> Callable[[Results], float | None]:
    return lambda results: results[arm].median(metric) if arm in results else None


@dataclass(frozen=True, slots=True)
class Target:
    goal: str
    bound: float
    at_least: bool                                   # True: measured >= bound; False: measured <= bound
    percent: bool                                    # shown as a percentage (else as a ratio, x)
    measure: Callable[[Results], float | None]


TARGETS = (
    Target(f"{SEED_ARM} ≥ 2.0× serial AR (tokens/s)", 2.0, True, False, _ratio(SEED_ARM, "ar")),
    Target(f"{SEED_ARM} ≥ 1.5× HF assisted generation", 1.5, True, False, _ratio(SEED_ARM, "hf-assisted")),
    Target(f"{SEED_ARM} ≥ parallel batched AR", 1.0, True, False, _ratio(SEED_ARM, "parallel")),
    Target("verifier busy ≥ 95 %", 0.95, True, True, _median(SEED_ARM, "verifier_busy")),
    Target("runtime overhead ≤ 2 % of verifier busy time", 0.02, False, True, _median(SEED_ARM, "overhead")),
)


@dataclass(frozen=True, slots=True)
class TargetResult:
    goal: str
    bound: float
    measured: float | None        # None: an arm it needs was not measured (skipped, failed, not chosen)
    met: bool | None
    margin: float | None          # how far on the good side of the bound (negative: missed by that much)
    percent: bool

    def to_json(self) -> dict:
        return asdict(self)


def evaluate(results: list[ArmResult]) -> list[TargetResult]:
    by_name = {r.name: r for r in results}
    out = []
    for t in TARGETS:
        value = t.measure(by_name)
        margin = None if value is None else (value - t.bound if t.at_least else t.bound - value)
        out.append(TargetResult(t.goal, t.bound, value, None if margin is None else margin >= 0, margin, t.percent))
    return out


def condition_differences(config: RunConfig) -> list[str]:
    """How this run's conditions differ from the ones the goals are stated for (empty: the same)."""
    differ = []
    if config.backend != BackendKind.HF:
        differ.append(f"backend {config.backend} (goals: hf)")
    elif config.target not in (None, DEFAULT) or config.draft is not None:
        differ.append("a model pair other than the default")
    if config.n_sequences != 3:
        differ.append(f"n = {config.n_sequences} (goals: n = 3)")
    if config.model_dtype != "fp32":
        differ.append(f"dtype {config.model_dtype} (goals: fp32)")
    if config.model_device != "cpu":
        differ.append(f"device {config.model_device} (goals: the CPU)")
    return differ
