"""One `specsched bench` invocation: settings -> arms -> interleaved measurement (or a sweep) -> record."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ...backends.backend import get_backend
from ...core.config import BackendKind, ConfigError, RunConfig
from ...engine.collected import Interrupted
from ...engine.engine import Engine
from .arms import build_arms, other_numerics
from .measure import ArmResult, Stop, measure
from .record import BenchRecord
from .sweep import Value, run_sweep


@dataclass(slots=True)
class BenchSettings:
    base: RunConfig                      # the shared workload, prompts included
    arms: list[str]                      # canonical order, "ar" included (arms.parse_arms)
    warmup: int = 1
    repeats: int = 5
    sweep: str | None = None             # an axis of sweep.AXES, or None for the one comparison
    values: list[Value] = field(default_factory=list)
    n_prompts: int | None = None         # None: one prompt per thought
    task: str | None = None
    smoke: bool = False

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ConfigError(f"--repeats must be at least 1, got {self.repeats}")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be at least 0, got {self.warmup}")
        if self.sweep and not self.values:
            raise ConfigError(f"--sweep {self.sweep} needs at least one value")


class Engines:
    """The benchmark's engine: one for every arm of every point, so that the models load once; a sweep over
    drafts needs one per draft (the draft is an engine's setting: the model its workers load)."""

    def __init__(self, base: RunConfig) -> None:
        self.base, self.engine, self.models_loaded, self.mps = base, None, 0, None
        self.startup_s = 0.0
        self.open(base)

    def open(self, config: RunConfig) -> Engine:
        """An engine for `config`'s draft, its workers started (no sample includes a model load)."""
        self.close()
        t0 = time.monotonic()
        self.engine = Engine(self.base.replace(draft=config.draft))
        self.engine.start_workers(config.n_sequences)
        self.startup_s += time.monotonic() - t0
        return self.engine

    def for_point(self, config: RunConfig) -> Engine:
        return self.engine if config.draft == self.engine.config.draft else self.open(config)

    def close(self) -> None:
        if self.engine is not None:
            self.models_loaded += self.engine.models_loaded
            self.mps = self.engine.mps
            self.engine.close()
            self.engine = None


def run_bench(settings: BenchSettings, progress: Callable[[str], None] | None = None) -> BenchRecord:
    """Every runtime arm of every point runs as a job on one engine (one per draft in `--sweep draft`): the
    models load once per benchmark. Bad policy, model pair or prompts: one line, before any process (the
    engine checks, then starts them)."""
    t0 = time.monotonic()
    first = settings.values[0] if settings.sweep == "draft" else settings.base.draft
    engines = Engines(dataclasses.replace(settings.base, draft=first))
    try:
        record = _run_bench(settings, engines, progress)
    finally:
        engines.close()
    record.models_loaded, record.startup_s, record.total_s = engines.models_loaded, engines.startup_s, \
        time.monotonic() - t0
    record.mps_daemon = engines.mps
    return record


def _run_bench(s: BenchSettings, engines: Engines, progress: Callable[[str], None] | None) -> BenchRecord:
    stop = Stop()  # Ctrl-C or SIGTERM: what was measured until then is the record (stopped_by says so)

    def measure_point(config: RunConfig) -> list[ArmResult]:
        try:
            engine = engines.for_point(config)
            arms = build_arms(s.arms, config, engine=engine)  # loads the transformers peers' models
        except (KeyboardInterrupt, Interrupted) as exc:
            stop.caught(exc)
            stop.at, results = "preparing the arms", []
        else:
            results = measure(arms, warmup=s.warmup, repeats=s.repeats, greedy=config.sampling.greedy,
                              progress=progress, uncompared=other_numerics(config), stop=stop)
        record.stopped_by, record.stopped_at = stop.signal, stop.at if stop.signal else None
        return results

    record = BenchRecord(s.base, s.warmup, s.repeats, smoke=s.smoke, target_type=target_type(s.base))
    if s.sweep is None:
        record.arms = measure_point(s.base)
        return record

    def at_point(config: RunConfig) -> list[ArmResult]:
        if progress:
            progress(f"sweep {s.sweep}: n {config.n_sequences}, k {config.shape.k}, "
                     f"k-config {config.shape.k_config or '-'}, T {config.sampling.temperature:g}, "
                     f"N:L {config.lanes.count}:{config.lanes.length}")
        return measure_point(config)

    record.sweep_axis = s.sweep
    record.sweep = run_sweep(s.sweep, s.values, s.base, at_point, n_prompts=s.n_prompts, task=s.task,
                             stopped=lambda: stop.signal is not None)
    return record


def target_type(config: RunConfig) -> str | None:
    """The llamacpp target's GGUF weight type ("F32", "Q4_1", ...): None on the other backends."""
    if config.backend != BackendKind.LLAMACPP:
        return None

    return get_backend(config).info.file_type
