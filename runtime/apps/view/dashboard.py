"""One frame of the live view: a header, the Gantt chart, the run's numbers, one line per process.

Everything comes from a ``Snapshot``; the lines are plain segments (no tables to lay out), so a
frame costs little more than the Gantt itself.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from .gantt import Gantt
from .monitor import Snapshot

MAX_PROCESS_LINES = 10
_BOLD, _DIM, _HEAD = Style(bold=True), Style(dim=True), Style(bold=True, color="cyan")


class Dashboard:
    """The frame of a snapshot.

    Args:
        snapshot: what to draw.
        max_rows: most process rows in the Gantt chart (default 17, the verifier's included).
        processes: add the per-process lines: pid, tokens, waiting, CPU %, RSS, and GPU SM % and memory
            where NVML reports them (default True).
    """

    def __init__(self, snapshot: Snapshot, *, max_rows: int = 17, processes: bool = True) -> None:
        self.snapshot = snapshot
        self.max_rows = max_rows
        self.processes = processes

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s, width = self.snapshot, options.max_width
        state = "finished" if s.finished else "running"
        yield from _line(width, f"specsched · {s.title} · {state} · elapsed {s.elapsed:.1f} s", _HEAD)
        yield Gantt(s, max_rows=self.max_rows)
        alpha = "n/a" if s.alpha is None else f"{s.alpha:.3f}" if s.alpha_exact else f"≈ {s.alpha:.2f}"
        yield from _line(width, f"tokens {s.tokens}/{s.tokens_max} · {s.tokens_per_s:.1f} tok/s · "
                                f"α {alpha} · sequences done {s.done}/{s.sequences}", _BOLD)
        gpu = "" if s.gpu_busy is None else f" · GPU busy {s.gpu_busy:.0f} %"  # every process on it (gpu_usage.py)
        yield from _line(width, f"verifier busy {100 * s.busy:.1f} % · {s.verifications} verifications · "
                                f"run queue mean {s.queue_mean:.2f}{gpu}", _BOLD)
        if self.processes:
            yield from self._processes(width)

    def _processes(self, width: int) -> RenderResult:
        s = self.snapshot
        usage = {u.name: u for u in s.usage}
        names = ["verifier", *(n for w in sorted(s.tokens_by_worker) for n in (f"draft-{w}", *_lanes(usage, w))),
                 "supervisor"]
        if len(names) > MAX_PROCESS_LINES:
            names = names[:MAX_PROCESS_LINES - 2] + names[-1:]
        gpu = any(u.on_gpu for u in s.usage)  # GPU columns only where NVML reports (gpu_usage.py)
        header = f"{'process':<12}{'pid':>8}{'state':>10}{'tokens':>8}{'waiting':>10}{'CPU %':>8}{'RSS':>10}"
        yield from _line(width, header + (f"{'GPU SM %':>10}{'GPU mem':>10}" if gpu else ""), _DIM)
        for name in names:
            u = usage.get(name)
            lane = " lane " in name  # a lane process of the worker above: no tokens or waiting of its own
            worker = int(name.split("-")[1]) if name.startswith("draft-") and not lane else None
            tokens = s.tokens if name == "verifier" else s.tokens_by_worker.get(worker)
            waiting = s.waiting.get(worker)
            label = f"└ lane {name.rpartition(' ')[2]}" if lane else name.replace("-", " ")
            yield from _line(width,
                f"{label:<12}{u.pid if u else '':>8}{s.states.get(name, ''):>10}"
                f"{'' if tokens is None else tokens:>8}"
                f"{'' if waiting is None else f'{waiting:.3f} s':>10}"
                f"{f'{u.cpu_percent:.0f}' if u else '':>8}"
                f"{f'{u.rss_bytes / 2**20:.0f} MiB' if u else '':>10}" + (_gpu_columns(u) if gpu else ""),
                _DIM if lane else None)
        hidden = len(s.tokens_by_worker) - sum(n.startswith("draft-") and " lane " not in n for n in names)
        if hidden > 0:
            yield from _line(width, f"… {hidden} more draft workers", _DIM)


def _lanes(usage: dict, worker: int) -> list[str]:
    """Worker `worker`'s lane processes among the sampled ones (--branch-processes), by lane index."""
    prefix = f"draft-{worker} lane "
    return sorted((n for n in usage if n.startswith(prefix)), key=lambda n: int(n[len(prefix):]))


def _gpu_columns(u) -> str:
    sm = "" if u is None or u.gpu_percent is None else f"{u.gpu_percent:.0f}"
    memory = "" if u is None or u.gpu_bytes is None else f"{u.gpu_bytes / 2**20:.0f} MiB"
    return f"{sm:>10}{memory:>10}"


def _line(width: int, text: str, style: Style | None) -> list[Segment]:
    """One line cropped to the width: a wrapped line would break the live display's redraw."""
    return [Segment(text[:width], style), Segment.line()]
