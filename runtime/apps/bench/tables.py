"""What `specsched bench` prints (Rich tables) and writes for BENCHMARKS.md (markdown): the same rows.

Tables: the arms (median tokens/s [min-max], speedup over serial AR, α, tokens per target forward,
verifier busy, runtime overhead, CPU time per token, output check), the goals (met/missed and by how much), and a sweep.
A greedy output that differs from serial AR is a losslessness bug: it gets a red panel of its own.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from . import targets
from .arms import BRANCH_ARMS
from .measure import ArmResult
from .record import BenchRecord
from .sweep import SweepPoint, label

# tok/s: median over the repeats, min–max their spread; ×ar: speedup over serial AR; tok/ver: committed tokens per
# target forward (1 for serial AR; Self-Draft's lanes ride in the same forward); busy: verifier busy share of
# the decode window; ovh: runtime overhead as a share of verifier busy time (overhead.py); = ar: greedy
# output identical to serial AR's; cpu ms/tok: CPU time of every process of the run per token (cpu.py).
ARM_HEADERS = ["arm", "tok/s", "min–max", "× ar", "α", "tok/ver", "draft", "aside", "busy", "ovh", "wall s",
               "cpu ms/tok", "= ar"]
TARGET_HEADERS = ["goal", "measured", "result"]


def _f(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f} %"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def _rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.1f}" if tokens_per_s < 100 else f"{tokens_per_s:.0f}"


def _match(r: ArmResult) -> str:
    if r.outputs_match_ar is None:
        return "n/a" if r.samples else "–"
    return "✓" if r.outputs_match_ar else f"✗ seq {','.join(map(str, r.mismatched))}"


def _rate_cell(r: ArmResult) -> str:
    """An arm with no measured run either failed (its errors say why) or was never run: a benchmark
    stopped by a signal (or its time budget, benchmarks/gpu.sh) before it came to this arm."""
    if r.tokens_per_s is not None:
        return f"{r.tokens_per_s:.1f}"
    return "failed" if r.errors else "not measured"


def arm_rows(results: list[ArmResult]) -> list[list[str]]:
    rows = []
    for r in results:
        if r.skipped:
            rows.append([r.name, "skipped", *["–"] * 10, _match(r)])
            continue
        spread = r.spread()
        rows.append([r.name, _rate_cell(r),
                     f"{_rate(spread[0])}–{_rate(spread[1])}" if spread else "–",
                     _f(r.speedup_vs_ar, ".2f") + ("×" if r.speedup_vs_ar is not None else ""),
                     _f(r.median("acceptance_rate"), ".3f"), _f(r.median("mean_tokens_per_verify"), ".2f"),
                     _f(r.median("draft_size"), ".1f"), _pct(r.median("aside_share"), 0),
                     _pct(r.median("verifier_busy")), _pct(r.median("overhead")), _f(r.median("wall_s"), ".2f"),
                     _f(_ms(r.median("cpu_s_per_token")), ".1f"), _match(r)])
    return rows


def target_rows(record: BenchRecord) -> list[list[str]]:
    rows = []
    for t in targets.evaluate(record.arms):
        measured = (_pct(t.measured) if t.percent else _f(t.measured, ".2f") + "×") if t.measured is not None \
            else "not measured"
        if t.margin is None:
            verdict = "–"
        else:
            size = f"{100 * abs(t.margin):.1f} pp" if t.percent else f"{abs(t.margin):.2f}×"
            verdict = f"met (by {size})" if t.met else f"MISSED (by {size})"
        rows.append([t.goal, measured, verdict])
    return rows


def sweep_headers(axis: str) -> list[str]:
    return [axis, *ARM_HEADERS]


def sweep_rows(points: list[SweepPoint]) -> list[list[str]]:
    rows = []
    for p in points:
        rows += [[label(p.value), *cells] for cells in arm_rows(p.arms)]
    return rows


def gpu_notes(record: BenchRecord) -> list[str]:
    """The SM % of each arm's processes together, and how busy their GPU was as a whole (MPS too), where NVML
    measured them (the SEED paper's Fig. 7)."""
    groups = [("", record.arms)] + [(f"{record.sweep_axis} {label(p.value)}: ", p.arms) for p in record.sweep]
    lines = []
    for metric, title in (("gpu_sm_percent", "GPU SM % (NVML)"), ("gpu_busy_percent", "GPU busy % (NVML, whole GPU)")):
        for prefix, arms in groups:
            cells = [f"{r.name} {r.median(metric):.0f} %" for r in arms if r.median(metric) is not None]
            if cells:
                lines.append(f"{title} · {prefix}{', '.join(cells)}")
    return lines


def skipped_notes(results: list[ArmResult]) -> list[str]:
    return list(dict.fromkeys(f"{r.name} skipped: {r.skipped}" for r in results if r.skipped))


def failure_notes(results: list[ArmResult]) -> list[str]:
    return [f"{r.name}: {len(r.errors)} failed run(s), first: {r.errors[0]}" for r in results if r.errors]


def _table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=0,
                  show_edge=False)
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 or h in ("arm", "goal") else "right", no_wrap=h != "goal")
    for row in rows:
        table.add_row(*row)
    return table


def _title(record: BenchRecord) -> str:
    """The shared settings; a sweep's axis is left out (it varies), and N:L only shown where a Self-Draft arm ran."""
    c, axis = record.config, record.sweep_axis
    shape = f"k-config {','.join(map(str, c.shape.k_config))}" if c.shape.k_config else f"k {c.shape.k}"
    lanes = axis != "branches" and any(r.name in BRANCH_ARMS for r in record.all_results)
    parts = [f"backend {c.backend}", f"n {c.n_sequences}" if axis != "n" else "",
             shape if axis not in ("k", "k-config") else "", f"lookup {c.draft_lookup}" if c.draft_lookup else "",
             f"N:L {c.lanes.count}:{c.lanes.length}" if lanes else "",
             f"T {c.sampling.temperature:g}" if axis != "temperature" else "",
             f"{c.max_new_tokens} tokens", f"{record.repeats} repeats after {record.warmup} warm-up", f"seed {c.seed}",
             "" if record.mps_daemon is None else f"MPS {'on' if record.mps_daemon else 'off'}",
             f"INTERRUPTED at {record.stopped_at}" if record.stopped_by else ""]
    return " · ".join(["specsched bench", *filter(None, parts)])


def print_report(record: BenchRecord, console: Console) -> None:
    if record.arms:
        console.print(_table(_title(record), ARM_HEADERS, arm_rows(record.arms)))
        console.print(_table("goals (CPU, default pair, n = 3, fp32)", TARGET_HEADERS, target_rows(record)))
        differ = targets.condition_differences(record.config)
        if differ:
            console.print(f"[yellow]conditions differ from the goals': {'; '.join(differ)}[/]", highlight=False)
    if record.sweep_axis:
        console.print(_table(f"sweep over {record.sweep_axis} · {_title(record)}",
                             sweep_headers(record.sweep_axis), sweep_rows(record.sweep)))
    for line in skipped_notes(record.all_results):
        console.print(line, style="dim", highlight=False)
    for line in failure_notes(record.all_results):
        console.print(line, style="bold red", highlight=False)
    bad = record.mismatched
    if bad and not record.exact_target:
        console.print(Panel(Group(
            Text(f"greedy outputs part from serial AR at near-ties ({record.target_numerics})", style="bold"),
            *[Text(f"{r.name}: sequences {', '.join(map(str, r.mismatched))}") for r in bad],
            Text("Expected on a quantised or half-precision target: a batch of tokens is scored with other kernels "
                 "(or summation orders) than one token, and the difference flips near-ties (docs/llamacpp.md, "
                 "numerics; GPU). On an fp32 target this panel would be a losslessness bug.")), style="yellow"))
    elif bad:
        console.print(Panel(Group(
            Text("✗ GREEDY OUTPUTS DIFFER FROM SERIAL AR", style="bold"),
            *[Text(f"{r.name}: sequences {', '.join(map(str, r.mismatched))}") for r in bad],
            Text("Speculative decoding must reproduce target-only decoding token for token: this is a "
                 "losslessness bug (or a peer that is not exact), and these arms' speedups mean nothing.")),
            style="bold red"))
    elif record.config.sampling.greedy and any(r.outputs_match_ar for r in record.all_results):
        console.print("[bold green]✓ greedy outputs identical to serial AR in every measured arm[/]")


def markdown(record: BenchRecord) -> str:
    """The same tables as markdown, for BENCHMARKS.md."""
    parts = []
    if record.arms:
        parts += [f"**{_title(record)}**", _md(ARM_HEADERS, arm_rows(record.arms)),
                  "**Goals** (CPU, default pair, n = 3, fp32)", _md(TARGET_HEADERS, target_rows(record))]
        differ = targets.condition_differences(record.config)
        if differ:
            parts.append(f"Conditions differ from the goals': {'; '.join(differ)}.")
    if record.sweep_axis:
        parts += [f"**Sweep over {record.sweep_axis}** · {_title(record)}",
                  _md(sweep_headers(record.sweep_axis), sweep_rows(record.sweep))]
    notes = gpu_notes(record) + skipped_notes(record.all_results) + failure_notes(record.all_results)
    if notes:
        parts.append("\n".join(f"- {line}" for line in notes))
    bad = record.mismatched
    if bad:
        lead = (f"Greedy outputs part from serial AR at near-ties ({record.target_numerics}: batched kernels, "
                "expected)" if not record.exact_target else "✗ Greedy outputs differ from serial AR")
        parts.append(f"**{lead}:** "
                     + "; ".join(f"{r.name} (sequences {', '.join(map(str, r.mismatched))})" for r in bad))
    return "\n\n".join(parts) + "\n"


def _md(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)
