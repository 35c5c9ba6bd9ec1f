"""What `specsched run --task ...` prints: the tree it built, the answer, and what each phase cost."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from .tree import ANSWER, EVALUATE, GENERATE, Tree

SNIPPET = 90  # characters of a thought shown in the tree
CHECK_MARKS = {True: "✓ ", False: "≠ ", None: "  "}  # the task's own check of a thought (gsm8k: its arithmetic)
CHECK_LEGEND = "✓ the step's arithmetic holds · ≠ a wrong sum, or an empty or repeated step: ranked before the score"


def tree_view(tree: Tree) -> RenderableType:
    """The tree, one line per state: score (✗ = unparseable), ★ on the chosen path, the task's check (when it
    has one, CHECK_MARKS), the thought."""
    chosen = set(tree.chosen)
    checked = any(node.check is not None for node in tree.nodes)
    root = RichTree(Text(f"{tree.task}: {_snip(tree.problem.text, 2 * SNIPPET)}", style="bold"))
    branches = {0: root}
    for node in tree.nodes[1:]:
        score = "  ?" if node.score is None else f"{node.score:>3g}" + ("" if node.score_ok else "✗")
        style = "bold green" if node.id in chosen else ("" if node.kept else "dim")
        mark = "★" if node.id in chosen else " "
        check = CHECK_MARKS[node.check] if checked else ""
        label = Text(f"{mark} [{score}] {check}{_snip(node.thought, SNIPPET)}", style=style)
        branches[node.id] = branches[node.parent].add(label)
    return root


def phases_table(tree: Tree) -> Table:
    table = Table(title=f"phases · mode {tree.mode} · policy {tree.policy}", title_justify="left")
    for col in ("phase", "runs", "tokens", "decode s", "wall s", "tok/s", "α"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    total_wall = 0.0
    for name in (GENERATE, EVALUATE, ANSWER):
        t = tree.phase_totals(name)
        if not t["runs"]:
            continue
        total_wall += t["wall_s"]
        alpha = "n/a" if t["acceptance_rate"] is None else f"{t['acceptance_rate']:.3f}"
        table.add_row(
            name,
            str(t["runs"]),
            str(t["tokens"]),
            f"{t['decode_s']:.2f}",
            f"{t['wall_s']:.2f}",
            f"{t['tokens_per_s']:.1f}",
            alpha,
        )
    table.add_row("total", "", "", "", f"{total_wall:.2f}", "", "", style="bold")
    return table


def summary(tree: Tree) -> RenderableType:
    lines = [tree_view(tree)]
    if any(node.check is not None for node in tree.nodes):
        lines.append(Text(CHECK_LEGEND, style="dim"))
    lines.append(phases_table(tree))
    answer = Text()
    answer.append("answer: ", style="bold")
    answer.append(tree.answer if tree.answer is not None else "(none)")
    if tree.correct is not None:
        gold = f" (gold {tree.problem.answer})" if tree.problem.answer else ""
        answer.append(f"  {'✓ correct' if tree.correct else '✗ wrong'}{gold}", style="green" if tree.correct else "red")
    lines.append(answer)
    if tree.unparseable:
        lines.append(Text(f"{tree.unparseable} evaluation(s) unparseable: scored lowest", style="yellow"))
    return Group(*lines)


def _snip(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"
