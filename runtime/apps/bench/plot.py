"""Small dependency-free SVG plots: speedup vs n, k or temperature (lines), speedup vs α (scatter), and
Self-Draft's N:L sweep (tokens per target forward and speedup vs L, one line per N, side by side).

Axes get "nice" ticks (1, 2, 2.5 or 5 times a power of ten), a dashed reference line marks 1x (= serial
AR), and every point carries a <title> with its exact values, shown as a tooltip by browsers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from xml.sax.saxutils import escape

from ...core.calibration import ece
from .arms import BRANCH_ARMS
from .measure import BASELINE, ArmResult
from .sweep import BranchShape, SweepPoint

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
LEFT, RIGHT, TOP, BOTTOM = 58, 150, 34, 46   # margins: room for tick labels, legend, title, axis label
WIDTH, HEIGHT = 560, 340                       # one plot (panel)


@dataclass(slots=True)
class Series:
    name: str
    points: list[tuple[float, float]]
    line: bool = True            # connect the points in x order (False: scatter)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: about ``count`` steps of 1, 2, 2.5 or 5 x 10^e."""
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def svg_plot(series: list[Series], *, title: str, x_label: str, y_label: str,
             width: int = WIDTH, height: int = HEIGHT, reference_y: float | None = 1.0,
             x_range: tuple[float, float] | None = None) -> str:
    return _document(width, height, _panel(series, title=title, x_label=x_label, y_label=y_label, width=width,
                                           height=height, reference_y=reference_y, x_range=x_range))


def svg_panels(panels: list[list[str]], *, width: int = WIDTH, height: int = HEIGHT) -> str:
    """Panels of `_panel`, each ``width`` x ``height``, side by side in one SVG."""
    body = []
    for i, panel in enumerate(panels):
        body += [f'<g transform="translate({i * width} 0)">', *panel, "</g>"]
    return _document(width * len(panels), height, body)


def _document(width: int, height: int, body: list[str]) -> str:
    return "\n".join([f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                      f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">', *body,
                      "</svg>"]) + "\n"


def _panel(series: list[Series], *, title: str, x_label: str, y_label: str, width: int, height: int,
           reference_y: float | None, x_range: tuple[float, float] | None) -> list[str]:
    """One plot's elements in its own box (0, 0)-(width, height)."""
    xs = [x for s in series for x, _ in s.points] + list(x_range or ())
    ys = [y for s in series for _, y in s.points] + ([reference_y] if reference_y is not None else [])
    xt = nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    yt = nice_ticks(min([0.0, *ys]), max(ys, default=1.0))
    pw, ph = width - LEFT - RIGHT, height - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + pw * (x - xt[0]) / (xt[-1] - xt[0])

    def sy(y: float) -> float:
        return TOP + ph * (1 - (y - yt[0]) / (yt[-1] - yt[0]))

    out = [f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="13" font-weight="bold">{escape(title)}</text>']
    for x in xt:
        out.append(f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{TOP + ph}" stroke="#eee"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{TOP + ph + 15}" text-anchor="middle">{_num(x)}</text>')
    for y in yt:
        out.append(f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + pw}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{_num(y)}</text>')
    out.append(f'<path d="M{LEFT},{TOP} V{TOP + ph} H{LEFT + pw}" fill="none" stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {TOP + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
               f'{escape(y_label)}</text>')
    if reference_y is not None:
        out.append(f'<line x1="{LEFT}" y1="{sy(reference_y):.1f}" x2="{LEFT + pw}" y2="{sy(reference_y):.1f}" '
                   f'stroke="#888" stroke-dasharray="4 3"/>')
    for i, s in enumerate(series):
        color = COLORS[i % len(COLORS)]
        pts = sorted(s.points) if s.line else s.points
        if s.line and len(pts) > 1:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}">'
                       f'<title>{escape(s.name)}: ({_num(x)}, {_num(y)})</title></circle>')
        ly = TOP + 8 + 16 * i
        out.append(f'<line x1="{LEFT + pw + 12}" y1="{ly}" x2="{LEFT + pw + 30}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 35}" y="{ly + 4}">{escape(s.name)}</text>')
    return out


def _num(v: float) -> str:
    return f"{v:.4g}"


AXIS_LABELS = {"n": "thoughts n (draft workers = sequences)", "k": "draft length k", "temperature": "temperature"}


def speedup_vs_axis(axis: str, points: list[SweepPoint]) -> str:
    """One line per arm: its speedup over serial AR at each value of a numeric sweep axis."""
    names = [a.name for a in points[0].arms if a.name != BASELINE] if points else []
    series = [Series(name, [(float(p.value), a.speedup_vs_ar) for p in points  # type: ignore[arg-type]
                            if (a := p.arm(name)) and a.speedup_vs_ar is not None]) for name in names]
    return svg_plot(series, title=f"speedup over serial AR vs {axis}", x_label=AXIS_LABELS[axis],
                    y_label="speedup over serial AR (x)")


def branches_sweep(points: list[SweepPoint]) -> str:
    """Self-Draft's Fig. 5/6: tokens per target forward (left) and speedup over serial AR (right) against the
    branch length L, one line per number of lanes N (per arm and N when several Self-Draft arms ran)."""
    shapes = [(p, p.value) for p in points if isinstance(p.value, BranchShape)]
    arms = [a.name for a in points[0].arms if a.name in BRANCH_ARMS] if points else []
    lanes = sorted({shape.lanes for _, shape in shapes})

    def series(metric: Callable[[ArmResult], float | None]) -> list[Series]:
        return [Series(f"N = {n}" if len(arms) == 1 else f"{name} N = {n}",
                       [(float(shape.length), y) for p, shape in shapes
                        if shape.lanes == n and (a := p.arm(name)) and (y := metric(a)) is not None])
                for name in arms for n in lanes]

    def panel(metric: Callable[[ArmResult], float | None], what: str) -> list[str]:
        return _panel(series(metric), title=f"{what} vs L", x_label="branch length L (tokens per lane)",
                      y_label=what, width=WIDTH, height=HEIGHT, reference_y=1.0, x_range=None)

    return svg_panels([panel(lambda a: a.median("mean_tokens_per_verify"), "tokens per target forward"),
                       panel(lambda a: a.speedup_vs_ar, "speedup over serial AR (x)")])


def speedup_vs_alpha(results: list[ArmResult]) -> str:
    """Every measured arm that drafts, as (acceptance rate, speedup) points, one colour per arm."""
    by_arm: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        alpha = r.median("acceptance_rate")
        if alpha is not None and r.speedup_vs_ar is not None:
            by_arm.setdefault(r.name, []).append((alpha, r.speedup_vs_ar))
    series = [Series(name, pts, line=False) for name, pts in by_arm.items()]
    return svg_plot(series, title="speedup over serial AR vs acceptance rate", x_range=(0.0, 1.0),
                    x_label="acceptance rate α", y_label="speedup over serial AR (x)")


def reliability(calibration: dict, *, title: str = "draft calibration") -> str:
    """The reliability diagram of a run's calibration bins (runtime/core/calibration.py): per confidence bin,
    the share of judged draft tokens the target accepted against their mean confidence. On the diagonal,
    confidence is acceptance - PCT's premise."""
    proposed = calibration.get("proposed") or []
    points = [(c / n, a / n) for n, a, c in zip(proposed, calibration.get("accepted", []),
                                                   calibration.get("confidence", [])) if n]
    error = ece(calibration)
    label = f"{title} (ECE {error:.3f}, {sum(proposed)} tokens)" if error is not None else f"{title} (no tokens)"
    series = [Series("perfect", [(0.0, 0.0), (1.0, 1.0)]), Series("draft", points)]
    return svg_plot(series, title=label, x_label="draft confidence c (bin mean)", y_label="accepted share",
                    reference_y=None, x_range=(0.0, 1.0))

