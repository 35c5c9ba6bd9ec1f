"""`specsched rerun RECORD`: a recorded run, run again here, and its tokens checked against the record."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from specsched.runtime.exits import EXIT_FAILED
from specsched.runtime.rerun import NUMERIC_ROWS, Parting, Recorded, load_record, partings, provenance_rows

SHOWN_PARTINGS = 5  # sequences named in the line that says where the rerun left the record


def add_rerun_parser(sub) -> None:
    p = sub.add_parser("rerun", help="run a recorded run (`run --json`) again and check that its tokens are the "
                                     "record's")
    p.add_argument("path", metavar="RECORD", help="a `specsched run --prompt ... --json` (or --trace) file")
    p.add_argument("--json", default=None, metavar="PATH", help="write the rerun's record")
    p.add_argument("--trace", default=None, metavar="PATH", help="record the rerun for `specsched replay`")
    p.add_argument("--no-live", action="store_true",
                   help="no live view (on a terminal) and no progress lines (elsewhere)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=cmd_rerun)


def cmd_rerun(args: argparse.Namespace, console: Console) -> int:
    """0 when every sequence's tokens are the record's (a record that did not finish: begin with them), 1 when
    one parts from it or the rerun fails, 130/143 when it is interrupted."""
    from specsched.runtime.prompt_run import run_prompts

    recorded = load_record(args.path)
    record, code = run_prompts(args, console, recorded.config)
    if record.status != "ok":
        return code
    rows = provenance_rows(recorded.provenance, record.provenance or {})
    table = Table(title=f"rerun of {args.path}", title_justify="left")
    for column in ("", "record", "this run", ""):
        table.add_column(column)
    for name, old, new, same in rows:
        table.add_row(name, old, new, "same" if same else "[yellow]differs[/]")
    now_rate = record.metrics.tokens_per_s
    if recorded.tokens_per_s:
        table.add_row("tokens/s", f"{recorded.tokens_per_s:.1f}", f"{now_rate:.1f}",
                      f"×{now_rate / recorded.tokens_per_s:.2f}")
    console.print(table)
    parts = partings(recorded, {s.id: s.tokens for s in record.sequences})
    console.print(verdict(recorded, parts, [name for name, _, _, same in rows if not same]), highlight=False)
    return code or (EXIT_FAILED if parts else 0)


def verdict(recorded: Recorded, parts: list[Parting], differing: list[str]) -> str:
    n, tokens = len(recorded.tokens), sum(map(len, recorded.tokens.values()))
    if not parts:
        whole = "are" if recorded.status == "ok" else f"begin with (the record is {recorded.status})"
        return f"[green]✓ every sequence's tokens {whole} the record's: {n} sequences, {tokens} tokens[/]"
    named = "; ".join(f"sequence {p.seq} at token {p.at} (recorded {_token(p.recorded)}, now {_token(p.now)})"
                      for p in parts[:SHOWN_PARTINGS])
    more = f"; {len(parts) - SHOWN_PARTINGS} more" if len(parts) > SHOWN_PARTINGS else ""
    numeric = [d for d in differing if d in NUMERIC_ROWS]
    timed = [flag for flag, on in (("--tree pct", recorded.config.tree == "pct"),
                                   ("--step-aside on", recorded.config.steps_aside)) if on]
    if timed and recorded.config.temperature > 0:
        why = (f"the record samples (--temperature {recorded.config.temperature:g}) with {' and '.join(timed)}, "
               "which shape drafts from measured times: its text varies from run to run, each still the target's "
               "law (README: Faults), so only a greedy run of it can be checked")
    elif numeric:
        why = (f"the record was made with another {', '.join(numeric)}: other weights or other arithmetic can "
               "break a near-tie the other way (README: Floating point)")
    else:
        why = "nothing that changes the arithmetic differs: a floating-point tie (README: Floating point) or a bug"
    return f"[red]✗ {len(parts)} of {n} sequences part from the record: {named}{more}[/]\n{why}"


def _token(token: int | None) -> str:
    return "its end" if token is None else str(token)
