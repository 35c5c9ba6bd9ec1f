"""How a run is watched: a Rich Live view on a terminal, plain progress lines anywhere else.

Both are driven by the supervisor's ``on_update(collected)`` (called after each batch of telemetry
and on quiet ticks, at least every 100 ms), run on the supervisor's own thread - no locks, the
workers never print - and count the CPU time they spend, so a run can state what watching it cost.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live

from ...engine.collected import Collected
from .dashboard import Dashboard
from .monitor import Monitor, Snapshot

MIN_HZ, MAX_HZ = 4.0, 10.0   # the live view's redraw rate stays in this range...
VIEW_SHARE = 0.01             # ...and within it aims to cost 1 % of the CPU the run is using
# seconds between two progress lines: a log that someone reads later wants a heartbeat, not a line a second (the
# main job's tree printed 352 of them); a tree's phases, and every run, end with a line of their own besides
PROGRESS_EVERY_S = 30.0


class _View:
    """Rate-limited redraws from ``Collected``; ``cpu_s`` is the thread CPU time they took."""

    def __init__(self, monitor: Monitor, console: Console, clock: Callable[[], float]) -> None:
        self.monitor, self.console, self.clock = monitor, console, clock
        self.cpu_s = 0.0
        self.frames = 0
        self._next = 0.0
        self._first: float | None = None
        self._last = 0.0
        self._collected: Collected | None = None

    def update(self, collected: Collected) -> None:
        started = time.thread_time()
        self._collected = collected
        now = time.monotonic()
        if now >= self._next:
            self.monitor.feed(collected)
            snapshot = self.monitor.snapshot(collected, self.clock(), columns=self.console.width - 10)
            self.draw(snapshot)
            self.frames += 1
            self._first = now if self._first is None else self._first
            self._last = now
            # fixed-rate: a frame drawn late (the supervisor ticks every <= 100 ms) does not push
            # every later one back, so the rate holds on average
            due = self._next if self._next > 0 else now
            self._next = max(due + self.interval(snapshot, time.thread_time() - started), now)
        self.cpu_s += time.thread_time() - started

    @property
    def hz(self) -> float:
        """The redraw rate achieved so far."""
        span = self._last - (self._first or 0.0)
        return (self.frames - 1) / span if self.frames > 1 and span > 0 else 0.0

    def interval(self, snapshot: Snapshot, frame_cpu_s: float) -> float:
        raise NotImplementedError

    def draw(self, snapshot: Snapshot) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _draw_final(self) -> None:
        """The whole run's frame, once it has ended (nothing if the run never reported: bad input)."""
        if self._collected is None:
            return
        self.monitor.feed(self._collected)
        self.draw(self.monitor.snapshot(self._collected, self.clock(), final=True))
        self.frames += 1
        self._last = time.monotonic()


class LiveView(_View):
    """The Gantt dashboard, redrawn in place 4-10 times a second; the whole run's chart at the end."""

    kind = "live"

    def __init__(self, monitor: Monitor, console: Console, *,
                 clock: Callable[[], float] = time.monotonic, transient: bool = False) -> None:
        super().__init__(monitor, console, clock)
        # transient: the view vanishes when the run ends (a job of many runs prints its own summary)
        self._live = Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False,
                          transient=transient)
        self._started = False
        self._frame_cpu = 0.0

    def interval(self, snapshot: Snapshot, frame_cpu_s: float) -> float:
        # a frame every t seconds costs frame_cpu / t of a core; the run uses `cores` of them, so
        # t = frame_cpu / (VIEW_SHARE * cores) keeps the view at VIEW_SHARE - within 4..10 Hz
        self._frame_cpu = frame_cpu_s if not self._frame_cpu else 0.8 * self._frame_cpu + 0.2 * frame_cpu_s
        cores = sum(u.cpu_percent for u in snapshot.usage) / 100
        wanted = self._frame_cpu / (VIEW_SHARE * cores) if cores > 0 else float("inf")
        return min(max(wanted, 1 / MAX_HZ), 1 / MIN_HZ)

    def draw(self, snapshot: Snapshot) -> None:
        if not self._started:   # only once the supervisor runs: bad input prints its one line alone
            self._live.start()
            self._started = True
        self._live.update(Dashboard(snapshot), refresh=True)

    def __exit__(self, *exc: object) -> None:
        started = time.thread_time()
        try:
            self._draw_final()
        finally:
            if self._started:
                self._live.stop()
            self.cpu_s += time.thread_time() - started


class ProgressLines(_View):
    """For a pipe or a log file: one plain line every ``every`` seconds, no cursor movement, and
    (``final``) one last line on exit with the whole run's counts - so even a run shorter than one
    interval logs its final token count."""

    kind = "lines"

    def __init__(self, monitor: Monitor, console: Console, *, every: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, final: bool = True) -> None:
        super().__init__(monitor, console, clock)
        self.every = every
        self.final = final
        self._next = time.monotonic() + every   # the first line after one interval, not at once

    def interval(self, snapshot: Snapshot, frame_cpu_s: float) -> float:
        return self.every

    def draw(self, snapshot: Snapshot) -> None:
        self.console.print(progress_line(snapshot), markup=False, highlight=False, soft_wrap=True)

    def __exit__(self, *exc: object) -> None:
        if self.final:
            started = time.thread_time()
            self._draw_final()
            self.cpu_s += time.thread_time() - started


def progress_line(s: Snapshot) -> str:
    alpha = "n/a" if s.alpha is None else f"{s.alpha:.2f}"
    where = f"{s.label} · " if s.label else ""
    return (f"[{s.elapsed:7.1f} s] {where}tokens {s.tokens}/{s.tokens_max} · {s.tokens_per_s:.1f} tok/s · "
            f"α {alpha} · verifier busy {100 * s.busy:.0f} % · queue mean {s.queue_mean:.2f} · "
            f"done {s.done}/{s.sequences}")


def choose_view(console: Console, monitor: Monitor, *, enabled: bool = True,
                clock: Callable[[], float] = time.monotonic, transient: bool = False,
                lines: bool = True) -> _View | None:
    """The live view on a terminal that redraws in place, progress lines otherwise, nothing with
    ``enabled=False``. ``transient``: the caller prints its own summary of the run, so neither view leaves a
    final one. ``lines=False``: nothing where the live view cannot draw (a server logs a line per request)."""
    if not enabled:
        return None
    # is_interactive, not is_terminal: Rich's Live shows a dumb terminal (TERM=dumb: Emacs' shell, some CI
    # consoles) only the final frame, so the live view there would be silent for the whole run; and
    # TTY_INTERACTIVE=0 is how a user asks Rich for no animation (a log coloured through FORCE_COLOR)
    if console.is_interactive:
        return LiveView(monitor, console, clock=clock, transient=transient)
    return ProgressLines(monitor, console, clock=clock, final=not transient) if lines else None


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every child it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def view_cost(view: _View, run_cpu_s: float) -> dict:
    """What watching cost, for the record: the view's CPU time against the whole run's."""
    return {"kind": view.kind, "refresh_hz": view.hz, "frames": view.frames, "cpu_s": view.cpu_s,
            "run_cpu_s": run_cpu_s, "share": view.cpu_s / run_cpu_s if run_cpu_s > 0 else None}
