"""From what the supervisor has collected to a ``Snapshot``: everything one frame of the view shows.

The monitor reads ``Collected`` incrementally (its event and commit lists only grow), so taking a
snapshot costs the visible window, not the whole run. A snapshot is plain data: renderables draw it
without touching the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.config import Mode, RunConfig
from ...core.config_checks import tree_nodes
from ...core.events import VERIFIER
from ...engine.collected import Collected
from ...engine.record import worker_of
from .timeline import Row, Timeline
from .usage import Usage

MIN_SPAN_S, MAX_SPAN_S, START_SPAN_S = 0.25, 60.0, 2.0


def draft_workers(config: RunConfig) -> int:
    return config.draft_workers


def draft_size(config: RunConfig) -> int:
    """Tokens in one full draft: k for a chain; for a tree of widths w1, w2, ..., w1 + w1 w2 + ..."""
    return tree_nodes(config.shape.widths)


@dataclass(frozen=True, slots=True)
class Snapshot:
    title: str
    mode: str
    rows: tuple[Row, ...]
    start: float                      # the window shown, on the shared monotonic clock
    end: float
    origin: float                     # t = 0 on the axis: the run's first event
    queue_known: float                # run-queue depth is complete up to here
    elapsed: float                    # since the supervisor started
    finished: bool
    tokens: int
    tokens_max: int
    tokens_by_worker: dict[int, int]
    waiting: dict[int, float]         # per worker: time queued so far
    decode_s: float                   # first event -> latest report
    busy: float                       # verifier busy share of decode_s
    verifications: int
    alpha: float | None
    alpha_exact: bool                 # from the verifier's final counters, not estimated
    queue_mean: float                 # time-averaged run-queue depth
    done: int
    sequences: int
    usage: tuple[Usage, ...] = ()
    gpu_busy: float | None = None     # % of time the run's GPU ran kernels, at the last sample (MPS too)
    label: str = ""                   # where a multi-run job is (a ToT level and phase); in the title too
    states: dict[str, str] = field(default_factory=dict)  # process name -> process-table state (live runs)
    marks: tuple[tuple[float, int, str], ...] = ()  # (when, worker, "fork" | "exit" | "restart") in the window
    mark_kinds: tuple[str, ...] = ()  # the marks the run can show: the legend explains these

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0


# a worker row's name by --drafter: a Self-Draft worker holds its sequence's branch lanes and caches
WORKER_LABEL = {"model": "draft", "branches": "branch", "both": "draft+br"}


class Monitor:
    def __init__(self, config: RunConfig, usage=None, *, label: str = "") -> None:
        self.config = config
        self.label = label                     # where a multi-run job is, e.g. a ToT level and phase
        self.workers = draft_workers(config)
        self.timeline = Timeline(self.workers)
        self.usage = usage                     # a UsageSampler, RecordedUsage, or None
        self.tokens_by_worker = {w: 0 for w in range(self.workers)}
        self.tokens = 0
        self._events = self._commits = 0

    def feed(self, collected: Collected) -> None:
        """Take in what arrived since the last call."""
        self.timeline.add(collected.events[self._events:])
        self._events = len(collected.events)
        for _, seq, n in collected.commits[self._commits:]:
            self._count(self.tokens_by_worker, seq, n)
            self.tokens += n
        self._commits = len(collected.commits)

    def _count(self, by_worker: dict[int, int], seq: int, n: int) -> None:
        if self.workers:   # target-only modes have no draft workers to credit
            w = worker_of(self.config, seq)
            by_worker[w] = by_worker.get(w, 0) + n

    def snapshot(self, collected: Collected, now: float, *, columns: int = 80,
                 final: bool = False) -> Snapshot:
        tl, c = self.timeline, self.config
        origin = tl.origin if tl.origin is not None else now
        frontier = tl.frontier if tl.frontier is not None else origin
        if final:
            start, end = origin, max(frontier, origin + 1e-6)
            horizons = {k: end for k in tl.keys}
        else:
            # about two cells per verification, so each one stays visible
            mean_verify = tl.busy / tl.verifications if tl.verifications else START_SPAN_S / columns / 2
            span = min(max(columns * mean_verify / 2, MIN_SPAN_S), MAX_SPAN_S)
            end = max(frontier, origin + span)
            start = end - span
            done = self._done_workers(collected)
            horizons = {k: (frontier if k in done else (tl.last_end(k) or origin)) for k in tl.keys}
        rows = tuple(tl.rows(start, end, horizons, collected.hosts, WORKER_LABEL.get(c.drafter, "draft")))
        active = [horizons[k] for k in tl.keys if k != VERIFIER and horizons[k] < frontier]
        decode = max(frontier - origin, 0.0)
        drafted = draft_size(c) * tl.drafts_verified
        counters = collected.counters
        if counters.get("drafted"):
            alpha, exact = counters["accepted"] / counters["drafted"], True
        elif self.workers and drafted:
            # live estimate: each verified draft commits its accepted tokens plus one target token
            alpha, exact = min(max((self.tokens - tl.drafts_verified) / drafted, 0.0), 1.0), False
        else:
            alpha, exact = None, False
        tokens, by_worker = self.tokens, dict(self.tokens_by_worker)
        if final and collected.tokens:   # the texts are complete: count them rather than the commits
            by_worker = {w: 0 for w in range(self.workers)}
            for seq, toks in collected.tokens.items():
                self._count(by_worker, seq, len(toks))
            tokens = sum(len(t) for t in collected.tokens.values())
        return Snapshot(
            title=" · ".join(filter(None, [self.label, f"{c.mode} · policy {c.policy} · backend {c.backend}"])),
            mode=c.mode,
            rows=rows, start=start, end=end, origin=origin,
            queue_known=min(active, default=end),
            elapsed=max(now - collected.started, 0.0) if collected.started else 0.0,
            finished=final, tokens=tokens, tokens_max=c.n_sequences * c.max_new_tokens,
            tokens_by_worker=by_worker, waiting=dict(tl.waiting),
            decode_s=decode, busy=min(tl.busy / decode, 1.0) if decode else 0.0,
            verifications=tl.verifications, alpha=alpha, alpha_exact=exact,
            queue_mean=tl.queued_time / decode if decode else 0.0,
            done=len(collected.done), sequences=c.n_sequences,
            usage=self.usage.sample(collected.processes, now) if self.usage else (),
            gpu_busy=_last_busy(self.usage),
            label=self.label, states=dict(collected.states),
            marks=tuple(m for m in collected.marks if start <= m[0] < end),
            mark_kinds=("fork", "exit") * (c.mode == Mode.DSBD) + ("restart",) * bool(collected.restarts),
        )

    def _done_workers(self, collected: Collected) -> set[int]:
        """Rows whose process has nothing left to do: idle from their last event on."""
        if len(collected.done) == self.config.n_sequences:
            return {VERIFIER, *range(self.workers)}
        return set(collected.done) if self.config.mode == Mode.SEED else set()


def _last_busy(usage) -> float | None:
    """The whole GPU's busy share at the newest sample, where NVML gave one (a replayed trace has none)."""
    rows = getattr(usage, "gpu_busy", None)
    return rows[-1][1] if rows else None
