"""Sweeps like the SEED paper's: one axis varied, every point measured with the baselines it needs.

Each point is a complete measurement (measure.py) of a few arms - by default serial AR, serial SD and
SEED (FCFS); serial AR and Self-Draft for ``branches`` - on that point's configuration, so its speedups
are ratios of arms measured in the same invocation at the same setting. Axes:

    n            number of thoughts = draft workers = sequences (the workload grows with it)
    k            draft length (chains)
    k-config     draft tree shapes; ``pct`` is the tree PCT shapes from the measured costs
    temperature  sampling temperature of target and draft alike
    task         the ToT task family the prompts come from (hf backend)
    branches     Self-Draft's branch lanes N and tokens per lane L, as ``N:L`` (Self-Draft's Fig. 5/6);
                 ``2,4:4,6,8`` is every pair of N in {2, 4} and L in {4, 6, 8}
    draft        the draft model: a named draft (``smollm2-distilled``, ``smollm2-feature``) or a folder
    coupling     how a sampled draft is accepted: ``residual`` or ``gumbel`` (runtime/core/coupling.py); what
                 drafter-invariant text costs in acceptance and time (needs --temperature > 0)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ...core.config import ConfigError, RunConfig
from . import workload
from .arms import shared
from .measure import ArmResult

AXES = ("n", "k", "k-config", "temperature", "task", "branches", "draft", "coupling")
DEFAULT_VALUES = {
    "n": "1,2,3,4,5,6,7,8",
    "k": "1,2,3,4,6,8",
    "k-config": "1,1,1,1; 2,2,1; 4,2,1; 2,2,2,1",
    "temperature": "0.2,1.0",
    "task": ",".join(workload.TASKS),
    "branches": "2,4:4,6,8",
    "draft": "smollm2-distilled,smollm2-feature",
    "coupling": "residual,gumbel",
}
SWEEP_ARMS = "ar,sd,seed-fcfs"
AXIS_ARMS = {"branches": "ar,branches"}  # axes whose default arms are not SWEEP_ARMS
LANES, LANE_LENGTH = (0, 64), (4, 64)    # RunConfig's bounds on N and L


class BranchShape(NamedTuple):
    """One point of the ``branches`` axis: N branch lanes of at most L tokens each."""

    lanes: int
    length: int

    def __str__(self) -> str:
        return f"{self.lanes}:{self.length}"


Value = int | float | str | tuple[int, ...]


def default_arms(axis: str) -> str:
    """The arms a sweep over ``axis`` measures unless --arms names others."""
    return AXIS_ARMS.get(axis, SWEEP_ARMS)


def label(value: Value) -> str:
    """A point's value as the tables show it: ``2,2,1`` for a tree shape, ``2:6`` for N:L."""
    if isinstance(value, tuple) and not isinstance(value, BranchShape):
        return ",".join(map(str, value))
    return str(value)


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
    """The axis' values from text (default: the paper-like list). Tree shapes and N:L pairs are separated
    by ``;``."""
    if axis not in AXES:
        raise ConfigError(f"unknown --sweep {axis!r}; choose one of {', '.join(AXES)}")
    text = DEFAULT_VALUES[axis] if text is None else text  # an empty --values is a mistake, not the defaults
    if axis == "branches":
        return branch_shapes(text)
    try:
        if axis == "k-config":
            shapes = [shape for shape in re.split(r"\s*;\s*", text.strip()) if shape]
            values: list[Value] = [shape if shape == "pct" else tuple(int(w) for w in shape.split(","))
                                   for shape in shapes]
            bad = [v for v in values if v != "pct" and (not v or min(v) < 1)]
        elif axis == "temperature":
            values = [float(x) for x in text.split(",") if x.strip()]
            bad = [v for v in values if v < 0]
        elif axis == "draft":
            values = [x.strip() for x in text.split(",") if x.strip()]
            bad = []
        elif axis == "coupling":
            values = [x.strip() for x in text.split(",") if x.strip()]
            bad = [v for v in values if v not in ("residual", "gumbel")]
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


def branch_shapes(text: str) -> list[Value]:
    """``N:L`` pairs separated by ``;``; ``N1,N2:L1,L2`` stands for every pair of the two lists."""
    usage = (f"give N:L pairs separated by ';' (N lanes {LANES[0]}..{LANES[1]}, L tokens per lane "
             f"{LANE_LENGTH[0]}..{LANE_LENGTH[1]}), e.g. '2:4; 4:6' or '1,2:4,6'")
    shapes: list[Value] = []
    items = [i.strip() for i in text.split(";") if i.strip()]
    if not items:
        raise ConfigError(f"--values for --sweep branches: no values in {text!r}; {usage}")
    for item in items:
        lanes, colon, lengths = item.partition(":")
        try:
            ns = [int(x) for x in lanes.split(",")]
            ls = [int(x) for x in lengths.split(",")]
        except ValueError:
            ns = ls = []
        if not colon or not ns or not ls:
            raise ConfigError(f"--values for --sweep branches: cannot read {item!r}; {usage}")
        for n in ns:
            for length in ls:
                if not (LANES[0] <= n <= LANES[1] and LANE_LENGTH[0] <= length <= LANE_LENGTH[1]):
                    raise ConfigError(f"--values for --sweep branches: bad value {n}:{length}; {usage}")
                shapes.append(BranchShape(n, length))
    return shapes


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
    elif axis == "branches":
        fields.update(branches=value.lanes, branch_length=value.length)  # type: ignore[union-attr]
    elif axis in ("draft", "coupling"):
        fields[axis] = value
    texts = workload.prompts(base.backend, n_prompts or n, task=value if axis == "task" else task)  # type: ignore[arg-type]
    fields["prompts"] = workload.per_thought(texts, n)
    return base.replace(**fields)


def run_sweep(axis: str, values: list[Value], base: RunConfig, measure_point: Callable[[RunConfig], list[ArmResult]],
              *, n_prompts: int | None = None, task: str | None = None,
              stopped: Callable[[], bool] = lambda: False) -> list[SweepPoint]:
    """Every point of the axis, measured by ``measure_point`` (which builds and runs the arms), up to the one
    a signal stopped (``stopped()``)."""
    configs = [point_config(base, axis, v, n_prompts=n_prompts, task=task) for v in values]  # validate all first
    points = []
    for v, c in zip(values, configs):
        points.append(SweepPoint(v, c, measure_point(c)))
        if stopped():
            break
    return points
