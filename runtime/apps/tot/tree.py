"""What a ToT search builds: the tree's nodes, the chosen path, the answer, and what each phase cost.

Plain dataclasses, so the tree goes into `--json` as it is and a Rich view can draw it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .task import Problem

GENERATE, EVALUATE, ANSWER = "thought generation", "state evaluation", "answer"


@dataclass(slots=True)
class Node:
    """One state: the root (level 0, no thought) or a thought proposed at `level` from `parent`."""

    id: int
    parent: int | None
    level: int
    thought: str = ""
    raw: str = ""  # the generator's text before `clean_thought`
    score: float | None = None
    score_ok: bool = True  # False: the evaluator's output was unparseable and got the lowest score
    evaluation: str = ""  # the evaluator's raw text
    check: bool | None = None  # the task's own check of the thought (gsm8k: its arithmetic); None: nothing to check
    kept: bool = False  # among the best `breadth` states of its level


@dataclass(slots=True)
class Phase:
    """One run on the runtime: the thoughts of a level, their evaluations, or the final answer."""

    level: int
    name: str
    sequences: int
    tokens: int
    wall_s: float  # supervisor start -> end: process start-up included
    decode_s: float  # first -> last recorded event
    startup_s: float
    acceptance_rate: float | None
    drafted: int
    accepted: int
    verifications: int
    status: str


@dataclass(slots=True)
class Tree:
    task: str
    problem: Problem
    mode: str
    policy: str
    thoughts: int
    steps: int
    breadth: int
    nodes: list[Node] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)  # node ids, root first
    answer: str | None = None
    answer_text: str | None = None  # the final generation, when the task has one
    correct: bool | None = None
    status: str = "ok"  # ok | failed | interrupted
    error: str | None = None
    stopped_by: str | None = None  # the signal that interrupted it (its exit status)

    def path(self, node_id: int) -> list[Node]:
        """The nodes from the root to `node_id`."""
        out = []
        node: Node | None = self.nodes[node_id]
        while node is not None:
            out.append(node)
            node = None if node.parent is None else self.nodes[node.parent]
        return out[::-1]

    def state(self, node_id: int) -> list[str]:
        return [n.thought for n in self.path(node_id)[1:]]

    @property
    def unparseable(self) -> int:
        return sum(1 for n in self.nodes if not n.score_ok)

    def phase_totals(self, name: str) -> dict:
        """Summed cost of every phase called `name`, with the acceptance rate over all of them."""
        ps = [p for p in self.phases if p.name == name]
        drafted, accepted = sum(p.drafted for p in ps), sum(p.accepted for p in ps)
        decode = sum(p.decode_s for p in ps)
        tokens = sum(p.tokens for p in ps)
        return {
            "runs": len(ps),
            "tokens": tokens,
            "wall_s": sum(p.wall_s for p in ps),
            "decode_s": decode,
            "tokens_per_s": tokens / decode if decode > 0 else 0.0,
            "acceptance_rate": accepted / drafted if drafted else None,
        }

    def to_json(self) -> dict:
        d = asdict(self)
        d["problem"] = asdict(self.problem)
        d["unparseable_evaluations"] = self.unparseable
        d["per_phase"] = {name: self.phase_totals(name) for name in (GENERATE, EVALUATE, ANSWER)}
        return d
