"""The contract between the ToT search and a task (gsm8k, creative, blocksworld).

The search (`search.py`) knows nothing about any task: it asks the task for prompts, hands the model's
text back to it, and keeps the states it scores highest. A state is the list of thoughts on the path
from the root; the problem is one input of the task (a question, four sentences, a Blocksworld instance).
Every method is pure: same input, same output - so a tree is reproducible from its seed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Problem:
    """One input of a task. `answer` is the gold answer when known (gsm8k number, None for creative);
    `data` holds task-specific structure (e.g. a Blocksworld instance as plain JSON-able values)."""

    id: str
    text: str  # what the prompts call {initial_prompt}
    answer: str | None = None
    data: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Score:
    """A parsed State Evaluator output. `ok` is False when nothing could be parsed: `value` is then
    the task's lowest score, and the search counts it in its metrics."""

    value: float
    ok: bool


class Task(ABC):
    """One ToT task. `steps` thought steps (tree depth = steps + 1: the root, then one level per step)."""

    name: str = ""
    steps: int = 1  # default T: gsm8k 2 (depth 3), creative 1 (depth 2), blocksworld 6 (depth 7)
    thought_tokens: int = 64  # max new tokens of one thought
    eval_tokens: int = 16  # max new tokens of one evaluation
    answer_tokens: int = 96  # max new tokens of the final answer (when `needs_answer`)
    lowest: float = 1.0  # score given to an unparseable evaluation

    @abstractmethod
    def thought_prompt(self, problem: Problem, state: list[str]) -> str:
        """The Thought Generator's prompt for expanding `state` by one thought."""

    def thought_reply(self, problem: Problem, state: list[str]) -> str:
        """The opening of the model's reply to `thought_prompt`, written for it: the model goes on from there, so
        its text is the new thought ("" : the reply is the model's from its first token)."""
        return ""

    @abstractmethod
    def clean_thought(self, text: str) -> str:
        """The thought kept in the tree from the model's raw output (trimmed to one step)."""

    def check_thought(self, problem: Problem, state: list[str]) -> bool | None:
        """A check of the newest thought that needs no model (gsm8k: its arithmetic): True passed, False failed,
        None nothing to check. The search ranks passed before unchecked before failed, then by the score."""
        return None

    @abstractmethod
    def eval_prompt(self, problem: Problem, state: list[str]) -> str:
        """The State Evaluator's prompt for `state` (whose last thought is the new one)."""

    @abstractmethod
    def parse_score(self, text: str) -> Score:
        """The evaluator's raw output -> a score (higher is better); never raises."""

    @property
    def needs_answer(self) -> bool:
        """Whether a final generation from the best state produces the answer (gsm8k), or the best
        state already is the answer (creative: the passage; blocksworld: the plan)."""
        return False

    def answer_prompt(self, problem: Problem, state: list[str]) -> str:
        raise NotImplementedError

    def answer_reply(self, problem: Problem, state: list[str]) -> str:
        """The opening of the model's reply to `answer_prompt`, written for it (as `thought_reply`)."""
        return ""

    @abstractmethod
    def final_answer(self, problem: Problem, state: list[str], answer_text: str | None) -> str:
        """The answer shown to the user: from the final generation, or from the best state."""

    def correct(self, problem: Problem, answer: str) -> bool | None:
        """Whether `answer` is right (None when the task has no checkable answer)."""
        return None

    @abstractmethod
    def samples(self) -> list[Problem]:
        """The sample problems shipped with the package (a handful, written for this project)."""

    @abstractmethod
    def load(self, rows: list[dict]) -> list[Problem]:
        """Problems from a `--data FILE.jsonl`, rows in the set's usual format; ValueError if not."""
