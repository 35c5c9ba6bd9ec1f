"""Sweeps like the SEED paper's: one axis varied, every point measured with the baselines it needs.

Each point is a complete measurement (measure.py) of a few arms - by default serial AR, serial SD and
SEED (FCFS) - on that point's configuration, so its speedups are ratios of arms measured in the same
invocation at the same setting. Axes:

    n            number of thoughts = draft workers = sequences (the workload grows with it)
    k            draft length (chains)
    k-config     draft tree shapes; ``pct`` is the tree PCT shapes from the measured costs
    temperature  sampling temperature of target and draft alike
    task         the ToT task family the prompts come from (hf backend)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from specsched.runtime.bench import workload
from specsched.runtime.bench.arms import shared
from specsched.runtime.bench.measure import ArmResult
from specsched.runtime.core.config import ConfigError, RunConfig

AXES = ("n", "k", "k-config", "temperature", "task")
DEFAULT_VALUES = {
    "n": "1,2,3,4,5,6,7,8",
    "k": "1,2,3,4,6,8",
    "k-config": "1,1,1,1; 2,2,1; 4,2,1; 2,2,2,1",
    "temperature": "0.2,1.0",
    "task": ",".join(workload.TASKS),
}
SWEEP_ARMS = "ar,sd,seed-fcfs"

Value = int | float | str | tuple[int, ...]


@dataclass(slots=True)
class SweepPoint:
    value: Value
    config: RunConfig
    arms: list[ArmResult]

    def arm(self, name: str) -> ArmResult | None:
        return next((a for a in self.arms if a.name == name), None)

    def to_json(self) -> dict:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": value, "config": shared(self.config), "arms": [a.to_json() for a in self.arms]}


def parse_values(axis: str, text: str | None) -> list[Value]:
    """The axis' values from text (default: the paper-like list). Tree shapes are separated by ``;``."""
    if axis not in AXES:
        raise ConfigError(f"unknown --sweep {axis!r}; choose one of {', '.join(AXES)}")
    text = text or DEFAULT_VALUES[axis]
    try:
        if axis == "k-config":
            shapes = [shape for shape in re.split(r"\s*;\s*", text.strip()) if shape]
            values: list[Value] = [shape if shape == "pct" else tuple(int(w) for w in shape.split(","))
                                   for shape in shapes]
            bad = [v for v in values if v != "pct" and (not v or min(v) < 1)]
        elif axis == "temperature":
            values = [float(x) for x in text.split(",") if x.strip()]
            bad = [v for v in values if v < 0]
        elif axis == "task":
            values = [x.strip() for x in text.split(",") if x.strip()]
            bad = [v for v in values if v not in workload.TASKS]
        else:
            values = [int(x) for x in text.split(",") if x.strip()]
            bad = [v for v in values if v < 1]
    except ValueError:
        raise ConfigError(f"--values for --sweep {axis}: cannot read {text!r}") from None
    if not values or bad:
        raise ConfigError(f"--values for --sweep {axis}: bad value(s) {bad or text!r}")
    return values


def point_config(base: RunConfig, axis: str, value: Value, *, n_prompts: int | None, task: str | None) -> RunConfig:
    """The base configuration moved to one point of the axis, with that point's prompts."""
    n = int(value) if axis == "n" else base.n_sequences  # type: ignore[arg-type]
    fields: dict = {"workers": n}
    if axis == "k":
        fields.update(k=value, k_config=[])
    elif axis == "k-config" and value == "pct":
        fields.update(k_config=[], tree="pct")
    elif axis == "k-config":
        fields.update(k_config=list(value), tree="fixed")  # type: ignore[arg-type]
    elif axis == "temperature":
        fields["temperature"] = value
    texts = workload.prompts(base.backend, n_prompts or n, task=value if axis == "task" else task)  # type: ignore[arg-type]
    fields["prompts"] = workload.per_thought(texts, n)
    return dataclasses.replace(base, **fields)


def run_sweep(axis: str, values: list[Value], base: RunConfig, measure_point: Callable[[RunConfig], list[ArmResult]],
              *, n_prompts: int | None = None, task: str | None = None) -> list[SweepPoint]:
    """Every point of the axis, measured by ``measure_point`` (which builds and runs the arms)."""
    configs = [point_config(base, axis, v, n_prompts=n_prompts, task=task) for v in values]  # validate all first
    return [SweepPoint(v, c, measure_point(c)) for v, c in zip(values, configs)]
