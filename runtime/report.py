"""What `specsched run` prints: the generated texts, then one summary table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specsched.runtime.app import RunRecord


def summary_table(record: RunRecord) -> Table:
    m, c = record.metrics, record.config
    table = Table(title=f"specsched · mode {c.mode} · policy {c.policy} · backend {c.backend}",
                  show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    alpha = "n/a" if m.acceptance_rate is None else f"{m.acceptance_rate:.3f}"
    rows = [
        ("status", record.status),
        ("sequences", str(c.n_sequences)),
        ("tokens", str(m.tokens)),
        ("wall time (decode)", f"{m.wall_s:.3f} s"),
        ("start-up (load models)", f"{m.startup_s:.2f} s"),
        ("tokens/s", f"{m.tokens_per_s:.1f}"),
        ("acceptance rate α", alpha),
        ("mean tokens / verification", f"{m.mean_tokens_per_verify:.2f}"),
        ("verifier busy", f"{100 * m.verifier_busy:.1f} %"),
    ]
    if 0 < len(m.waiting_s) <= 8:
        rows.append(("waiting per worker", " ".join(f"w{w}:{s:.3f}s" for w, s in m.waiting_s.items())))
    elif m.waiting_s:
        worst = max(m.waiting_s, key=m.waiting_s.__getitem__)
        mean = sum(m.waiting_s.values()) / len(m.waiting_s)
        rows.append(("waiting per worker", f"mean {mean:.3f}s, max {m.waiting_s[worst]:.3f}s (w{worst})"))
    if m.rejected_messages:
        rows.append(("rejected messages", str(m.rejected_messages)))
    for k, v in rows:
        table.add_row(k, v)
    return table


def print_record(record: RunRecord, console: Console, *, texts: bool = True) -> None:
    if texts:
        for s in record.sequences:
            mark = "" if s.finished else " [yellow](unfinished)[/]"
            console.print(f"[bold cyan]sequence {s.id}[/] (worker {s.worker}){mark}")
            console.print(s.text, markup=False, highlight=False)
            console.print()
    console.print(summary_table(record))
