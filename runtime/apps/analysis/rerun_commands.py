"""`specsched rerun`: the command and its verdict (rerun_cli.py: its parser)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ...engine.provenance import provenance
from ..commands.prompt_run import run_prompts
from ..run.exits import EXIT_FAILED
from ..tot.search import SearchConfig
from ..tot.task import Problem
from ..tot.task_registry import get_task
from ..tot.tot_commands import build_trees
from .rerun import (
    NODE_FIELDS,
    NUMERIC_ROWS,
    NodeParting,
    Parting,
    Recorded,
    RecordedTrees,
    load_record,
    partings,
    provenance_rows,
    tree_partings,
)

SHOWN_PARTINGS = 5  # sequences named in the line that says where the rerun left the record


def cmd_rerun(args: argparse.Namespace, console: Console) -> int:
    """0 when the output is the record's (a record that did not finish: begins with it), 1 when it parts from
    it or the rerun fails, 130/143 when it is interrupted."""
    recorded = load_record(args.path)
    if isinstance(recorded, RecordedTrees):
        return _rerun_trees(args, console, recorded)

    record, code = run_prompts(args, console, recorded.config)
    if record.status != "ok":
        return code
    _print_provenance(console, args.path, recorded.provenance, record.provenance or {},
                      (recorded.tokens_per_s, record.metrics.tokens_per_s))
    parts = partings(recorded, {s.id: s.tokens for s in record.sequences})
    console.print(verdict(recorded, parts, _differing(recorded.provenance, record.provenance or {})),
                  highlight=False)
    return code or (EXIT_FAILED if parts else 0)


def _rerun_trees(args: argparse.Namespace, console: Console, recorded: RecordedTrees) -> int:
    task = get_task(recorded.task)
    todo = [Problem(**p) for p in recorded.problems]
    trees, code = build_trees(args, console, task, todo, recorded.config, SearchConfig(**recorded.search))
    if code:
        return code
    now = provenance(recorded.config)
    _print_provenance(console, args.path, recorded.provenance, now)
    parts = tree_partings(recorded, [[{f: getattr(n, f) for f in NODE_FIELDS} for n in t.nodes] for t in trees])
    console.print(_tree_verdict(recorded, parts, _differing(recorded.provenance, now)), highlight=False)
    return EXIT_FAILED if parts else 0


def _print_provenance(console: Console, path: str, old: dict, new: dict,
                      rates: tuple[float | None, float] | None = None) -> None:
    table = Table(title=f"rerun of {path}", title_justify="left")
    for column in ("", "record", "this run", ""):
        table.add_column(column)
    for name, a, b, same in provenance_rows(old, new):
        table.add_row(name, a, b, "same" if same else "[yellow]differs[/]")
    if rates and rates[0]:
        table.add_row("tokens/s", f"{rates[0]:.1f}", f"{rates[1]:.1f}", f"×{rates[1] / rates[0]:.2f}")
    console.print(table)


def _differing(old: dict, new: dict) -> list[str]:
    return [name for name, _, _, same in provenance_rows(old, new) if not same]


def _why(config, differing: list[str]) -> str:
    """Why outputs may part: drafts shaped by measured times under sampling, other arithmetic, or neither."""
    numeric = [d for d in differing if d in NUMERIC_ROWS]
    if why := config.why_text_varies:
        return f"{why} (docs/faults.md), so only a greedy run of it can be checked"
    if numeric:
        return (f"the record was made with another {', '.join(numeric)}: other weights or other arithmetic can "
                "break a near-tie the other way (docs/lossless.md)")
    return "nothing that changes the arithmetic differs: a floating-point tie (docs/lossless.md) or a bug"


def verdict(recorded: Recorded, parts: list[Parting], differing: list[str]) -> str:
    """The line a run's rerun ends with (and, when it parts, why it may have)."""
    n, tokens = len(recorded.tokens), sum(map(len, recorded.tokens.values()))
    if not parts:
        whole = "are" if recorded.status == "ok" else f"begin with (the record is {recorded.status})"
        return f"[green]✓ every sequence's tokens {whole} the record's: {_count(n, 'sequence')}, {tokens} tokens[/]"
    named = "; ".join(f"sequence {p.seq} at token {p.at} (recorded {_token(p.recorded)}, now {_token(p.now)})"
                      for p in parts[:SHOWN_PARTINGS])
    more = f"; {len(parts) - SHOWN_PARTINGS} more" if len(parts) > SHOWN_PARTINGS else ""
    why = _why(recorded.config, differing)
    return f"[red]✗ {len(parts)} of {n} sequences part from the record: {named}{more}[/]\n{why}"


def _tree_verdict(recorded: RecordedTrees, parts: list[NodeParting], differing: list[str]) -> str:
    n, nodes = len(recorded.trees), sum(map(len, recorded.trees))
    if not parts:
        unfinished = [s for s in recorded.statuses if s != "ok"]
        whole = "is" if not unfinished else f"begins with (the record's last tree is {unfinished[0]})"
        return f"[green]✓ every tree {whole} the record's, node for node: {_count(n, 'tree')}, {nodes} nodes[/]"
    named = "; ".join(f"tree {p.tree} at node {p.node} ({p.what})" for p in parts[:SHOWN_PARTINGS])
    return f"[red]✗ {len(parts)} of {n} trees part from the record: {named}[/]\n{_why(recorded.config, differing)}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _token(token: int | None) -> str:
    return "its end" if token is None else str(token)
