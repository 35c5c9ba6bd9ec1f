"""Blocksworld (PlanBench): plan the actions that stack coloured blocks into a goal arrangement.

A thought is the next single action ("The current action is:"), so a state is the plan so far; the
evaluator judges the newest action "good" or "bad" after a few labelled demonstrations, as in the SEED
paper (Appendix C, whose demonstrations are not printed; ours are below). The best state's plan is the
answer, correct when it is legal and reaches the goal (actions after the goal is reached are not run).

`--data` rows are instances in the JSON shape of `blocks_plan.py`, with an optional "id":
{"init": [["red", "blue"], ["yellow"]], "goal": [["yellow", "red"]]}.
"""

from __future__ import annotations

from .blocks_domain import RESTRICTIONS, parse_action
from .blocks_plan import Check, Instance, validate
from .parse import parse_good_bad
from .rows import RowError, row_id
from .task import Problem, Score, Task

HEADER = (
    "I am playing with a set of blocks where I need to arrange the blocks into stacks. "
    "Here are the actions I can do:\n\n"
    "Pick up a block\nUnstack a block from on top of another block\nPut down a block\n"
    "Stack a block on top of another block\n\n"
    f"I have the following restrictions on my actions: {RESTRICTIONS}\n\n"
)

# The demonstrations' instance: yellow on blue, red on the table; the goal is red on blue. Its optimal
# plan: unstack yellow from blue, put down yellow, pick up red, stack red on blue (tests check the labels).
DEMO = {"init": [["blue", "yellow"], ["red"]], "goal": [["red", "blue"]]}
DEMO_THOUGHT = (
    ["unstack the yellow block from on top of the blue block", "put down the yellow block"],
    "pick up the red block",
)
DEMO_EVALUATIONS = [
    (["unstack the yellow block from on top of the blue block"], "good"),  # frees the blue block
    (["pick up the blue block"], "bad"),  # illegal: the yellow block is on it
    (  # legal, but it buries the red block, which still has to move
        ["unstack the yellow block from on top of the blue block", "stack the yellow block on top of the red block"],
        "bad",
    ),
]

# Drawn once with blocks_plan.generate(seed, blocks=n, plan_length=k) for (seed, n, k) = (1, 3, 2), (2, 3, 4),
# (3, 4, 4), (4, 4, 6), (5, 5, 6), and kept here as data so the samples never change with the generator.
SAMPLES = [
    ({"init": [["blue", "red"], ["orange"]], "goal": [["orange", "red"]]}, 2),
    ({"init": [["blue"], ["orange"], ["red"]], "goal": [["blue", "orange"], ["red", "blue"]]}, 4),
    ({"init": [["orange", "yellow", "blue", "red"]], "goal": [["blue", "red"]]}, 4),
    ({"init": [["blue", "yellow"], ["red", "orange"]], "goal": [["yellow", "red"], ["orange", "yellow"]]}, 6),
    (
        {
            "init": [["blue"], ["red", "orange"], ["white"], ["yellow"]],
            "goal": [["white", "blue"], ["orange", "white"], ["red", "yellow"]],
        },
        6,
    ),
]


def _plan_text(actions: list[str]) -> str:
    return "\n".join(actions)


class Blocksworld(Task):
    name = "blocksworld"
    steps = 6
    thought_tokens = 32  # one action sentence

    def thought_prompt(self, problem: Problem, state: list[str]) -> str:
        demo_plan, demo_action = DEMO_THOUGHT
        demo = Instance.from_json(DEMO).statement
        return (
            f"{HEADER}Here is an example.\n\n[STATEMENT]\n{demo}\n\n"
            f"My plan is as follows:\n{_plan_text(demo_plan)}\nThe current action is: {demo_action}\n\n"
            f"Now it is your turn. Write only the next action.\n\n[STATEMENT]\n{problem.text}\n\n"
            f"My plan is as follows:\n{_plan_text(state) or '(no actions yet)'}\n"
            "The current action is:"
        )

    def clean_thought(self, text: str) -> str:
        """The first action the model wrote, as its canonical sentence ("pick up the red block"); when no
        action can be read, the first non-empty line as written (the evaluator and validator judge it)."""
        action = parse_action(text)
        if action is not None:
            return str(action)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[0] if lines else ""

    def eval_prompt(self, problem: Problem, state: list[str]) -> str:
        demo = Instance.from_json(DEMO).statement
        examples = "".join(
            f"[STATEMENT]\n{demo}\n[ACTION]\n{_plan_text(plan)}\n[EVALUATION]\nThe evaluation is: {label}\n\n"
            for plan, label in DEMO_EVALUATIONS
        )
        return (
            f"{HEADER}Here are some examples.\n\n{examples}"
            "Please evaluate whether the given action is a good one under certain conditions.\n\n"
            f"[STATEMENT]\n{problem.text}\n[ACTION]\n{_plan_text(state)}\n[EVALUATION]\n"
            "The evaluation is:"
        )

    def parse_score(self, text: str) -> Score:
        return parse_good_bad(text)

    def final_answer(self, problem: Problem, state: list[str], answer_text: str | None) -> str:
        return _plan_text(state)

    def check(self, problem: Problem, answer: str) -> Check:
        """The validator's verdict on a plan (one action per line), with its reason."""
        return validate(Instance.from_json(problem.data), answer.splitlines())

    def correct(self, problem: Problem, answer: str) -> bool | None:
        verdict = self.check(problem, answer)
        return verdict.valid and verdict.reached_goal

    def samples(self) -> list[Problem]:
        problems = []
        for i, (data, optimal) in enumerate(SAMPLES, 1):
            instance = Instance.from_json(data)
            data = {**instance.to_json(), "optimal": optimal}  # optimal: the length of a shortest plan
            problems.append(Problem(f"blocksworld-sample-{i}", instance.statement, data=data))
        return problems

    def load(self, rows: list[dict]) -> list[Problem]:
        problems = []
        for i, row in enumerate(rows):
            try:
                instance = Instance.from_json(row)
            except ValueError as e:
                raise RowError(i, str(e)) from None
            problems.append(Problem(row_id(row, i, self.name), instance.statement, data=instance.to_json()))
        return problems
