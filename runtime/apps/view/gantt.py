"""The Gantt chart: one row per process over a window of time, newest on the right.

It reads like Figure 3(b) of the SEED paper: the verifier's row shows whose draft it is verifying
(the worker's id), each worker's row alternates draft / queued / verify, and idle time shows as
dots. In dsbd a worker's row also marks where it forks into a beam slot (``+``) and exits it (``†``),
as the beam width changes; any worker's row marks where it was restarted (``↻``), and on a server's engine
where a job begins on it (``▸``, traffic.py). Below it, the run-queue depth per cell and a time axis (seconds
since the run's first event).
"""

from __future__ import annotations

import functools
import io

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from ...core.config import Mode
from ...core.events import VERIFIER
from .monitor import Snapshot
from .timeline import ORDER, grid, queue_depth

# One glyph and one colour per state, the same everywhere (live view, SVG, compare).
GLYPHS = {"draft": "▒", "queued": "░", "verify": "█", "resample": "×", "idle": "·", "unknown": " "}
STYLES = {"draft": "blue", "queued": "yellow", "verify": "green", "resample": "bold red",
          "idle": "bright_black", "unknown": ""}
VERIFYING = "black on green"          # the verifier's verify cells carry the worker's id
QUEUE_STYLE = "magenta"
WORKER_MARKS = "0123456789abcdefghijklmnopqrstuvwxyz"
PROCESS_MARKS = {"fork": "+", "exit": "†", "restart": "↻", "job": "▸"}
MARK_WORDS = {"fork": "forks into a beam slot", "exit": "exits it", "restart": "restarted",
              "job": "a job begins on it"}
PROCESS_MARK_STYLE = "bold cyan"
MIN_COLUMNS = 10
_BOLD, _DIM = Style(bold=True), Style.parse(STYLES["idle"])


class Gantt:
    """A renderable of a snapshot's window.

    Args:
        snapshot: what to draw.
        legend: add the legend line (default True).
        max_rows: most process rows to draw, the verifier's included (default 17); the queue row
            still counts every worker.
    """

    def __init__(self, snapshot: Snapshot, *, legend: bool = True, max_rows: int = 17) -> None:
        self.snapshot = snapshot
        self.legend = legend
        self.max_rows = max_rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.snapshot
        label_width = max([len(r.label) for r in s.rows] + [len("queue")]) + 1
        columns = max(options.max_width - label_width, MIN_COLUMNS)
        # plain segments rather than Text: no wrapping to compute, which keeps a frame cheap
        shown = list(s.rows[:self.max_rows])
        g = grid(shown, s.start, s.end, columns)
        for r, row in enumerate(shown):
            codes = g.states[r]
            if row.worker == VERIFIER and s.mode in (Mode.SEED, Mode.SD):
                # the verifier's verify cells show whose draft: code len(ORDER) + worker id
                # record.worker_of, vectorised: its own sequence's worker in seed mode, the single one in sd
                workers = g.seqs[r] if s.mode == Mode.SEED else np.zeros_like(g.seqs[r])
                marked = (g.seqs[r] >= 0) & (workers < len(WORKER_MARKS))
                codes = np.where(marked, len(ORDER) + workers, codes)
            codes = _with_marks(codes, [(t, kind) for t, w, kind in s.marks if w == row.worker], s.start, s.end)
            yield from _line(row.label.ljust(label_width), codes)
        if len(s.rows) > self.max_rows:
            yield Segment(f"{'':<{label_width}}… {len(s.rows) - self.max_rows} more draft workers",
                          _DIM)
            yield Segment.line()
        if any(row.worker != VERIFIER for row in s.rows):   # target-only modes have no run queue
            depths = queue_depth(list(s.rows), s.start, s.end, columns, s.queue_known)
            yield from _line("queue".ljust(label_width), np.minimum(np.array(depths), 10) + 1, _DEPTHS)
        yield Segment(_axis(s, label_width, columns)[:options.max_width], _DIM)
        yield Segment.line()
        if self.legend:
            yield from _legend_lines(options.max_width, s.mark_kinds)


@functools.lru_cache(maxsize=8)
def _legend_lines(width: int, kinds: tuple[str, ...] = ()) -> list[Segment]:
    """The legend, laid out once per width: it is the same in every frame."""
    console = Console(width=width, file=io.StringIO(), color_system="truecolor", force_terminal=True)
    lines = console.render_lines(legend(kinds), console.options.update(width=width), pad=False)
    return [seg for line in lines for seg in (*line, Segment.line())]


def legend(kinds: tuple[str, ...] = ()) -> Text:
    """The legend; `kinds`: the process marks the run can show (Snapshot.mark_kinds)."""
    text = Text()
    for state, name in (("draft", "draft"), ("queued", "queued"), ("verify", "verify"),
                        ("resample", "resample"), ("idle", "idle")):
        text.append(GLYPHS[state], STYLES[state])
        text.append(f" {name}  ")
    text.append("0", VERIFYING)
    text.append(" verifying worker 0's draft  ")
    text.append("2", QUEUE_STYLE)
    text.append(" drafts in the run queue")
    for kind in kinds:
        text.append(f"  {PROCESS_MARKS[kind]}", PROCESS_MARK_STYLE)
        text.append(f" {MARK_WORDS[kind]}")
    return text


def _with_marks(codes: np.ndarray, marks: list[tuple[float, str]], start: float, end: float) -> np.ndarray:
    """A row's cells with its fork / exit marks drawn over the state of the cell each falls in."""
    if not marks:
        return codes
    codes = codes.copy()
    for t, kind in marks:
        cell = min(int((t - start) / (end - start) * len(codes)), len(codes) - 1)
        codes[cell] = _MARK_CODE[kind]
    return codes


# what each cell code draws: the states in ORDER, then the workers' ids on the verifier's row
_CODES = [(GLYPHS[s], Style.parse(STYLES[s])) for s in ORDER] + [(m, Style.parse(VERIFYING))
                                                                 for m in WORKER_MARKS] \
    + [(glyph, Style.parse(PROCESS_MARK_STYLE)) for glyph in PROCESS_MARKS.values()]
_MARK_CODE = {kind: len(ORDER) + len(WORKER_MARKS) + i for i, kind in enumerate(PROCESS_MARKS)}


def _line(label: str, codes: np.ndarray, table: list[tuple[str, Style]] = _CODES) -> list[Segment]:
    """A label, then each run of equal cells as one segment, then a line break."""
    out = [Segment(label, _BOLD)]
    edges = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), len(codes)]
    firsts = codes[edges[:-1]].tolist()
    for code, a, b in zip(firsts, edges, edges[1:]):
        glyph, style = table[code]
        if out[-1].style is style:    # e.g. 0 then 1 on the verifier's row: one segment
            out[-1] = Segment(out[-1].text + glyph * (b - a), style)
        else:
            out.append(Segment(glyph * (b - a), style))
    out.append(Segment.line())
    return out


# queue depth d draws entry d + 1: blank when unknown (-1), digits, "+" from 10 on
_DEPTHS = [(" ", Style()), ("0", _DIM)] + [(str(d), Style.parse(QUEUE_STYLE)) for d in range(1, 10)] \
    + [("+", Style.parse(QUEUE_STYLE))]


def _axis(s: Snapshot, label_width: int, columns: int) -> str:
    left, right = f"{s.start - s.origin:.2f} s", f"{s.end - s.origin:.2f} s"
    middle = f"{(s.start + s.end) / 2 - s.origin:.2f} s"
    ruler = list(left.ljust(columns))
    ruler[columns - len(right):] = right
    at = (columns - len(middle)) // 2
    if at > len(left) + 1 and at + len(middle) < columns - len(right) - 1:
        ruler[at:at + len(middle)] = middle
    return " " * label_width + "".join(ruler)
