"""GSM8K: grade-school word problems, solved one calculation per step.

The SEED paper (Appendix C) asks for a sub-question, then for its sub-answer. A 135M model given that frame
echoes it ("The previous sub-question is: ...") and rarely computes anything; shown one worked example and with
its reply opened at "Step k:", it writes one calculation ("12 - 4 = 8 pencils are left."). So a thought is one
step: the prompt is the example and the question, the model's reply already holds the steps of the state, and
the model writes the next. The evaluator scores the step 1-10; before that score the search ranks a step whose
arithmetic holds (arithmetic.py) above one that has none, and that above one with a wrong sum. From the best
chain the reply is opened at "Answer:" for the final number, which is checked against the gold answer.
"""

from __future__ import annotations

import re

from . import arithmetic
from .parse import extract_answer_number, normalise_number, parse_number
from .rows import RowError, row_id, text_field
from .task import Problem, Score, Task

# the worked example every prompt shows: a product, then a sum. The 135M model copies an example's shape (shown a
# subtraction for its second step, it wrote "20 - 3 = 13" for "she finds 3 more"), so the default problem has this
# shape, with other numbers and words; the other samples take it further than the model can follow
EXAMPLE_QUESTION = "Tom has 3 boxes with 4 apples in each box. He buys 2 more apples. How many apples does he have now?"
EXAMPLE_STEPS = ["3 * 4 = 12 apples in the boxes.", "12 + 2 = 14 apples in all."]
EXAMPLE_ANSWER = "14"
INSTRUCTION = "Solve the question one step at a time; each step is one calculation."

_LABEL = re.compile(r"^\s*(?:step\s*\d+\s*[:.)]\s*)+", re.I)  # "Step 2:" the model wrote again

# Written for this project (not taken from GSM8K); each answer worked by hand in the comment.
SAMPLES = [
    # the default: two steps of the worked example's shape, which SmolLM2-135M can do: 5 * 6 = 30; 30 + 4 = 34
    (
        "A teacher has 5 boxes with 6 pens in each box. She buys 4 more pens. How many pens does she have now?",
        "34",
    ),
    # (48 + 36) / 6 = 84 / 6 = 14
    (
        "A baker makes 48 rolls in the morning and 36 rolls in the afternoon. She packs all of them into bags "
        "of 6 rolls. How many bags does she fill?",
        "14",
    ),
    # one week: 5 * 12 + 2 * 20 = 60 + 40 = 100 pages; two weeks: 200
    (
        "Tomas reads 12 pages of his book on every weekday and 20 pages on each day of the weekend. How many "
        "pages does he read in two weeks?",
        "200",
    ),
    # 7 * 15 = 105; 105 - 23 = 82; 82 + 16 = 98
    (
        "A garden has 7 rows of tulips with 15 tulips in each row. Rabbits eat 23 of the tulips, and then the "
        "gardener plants 16 new ones. How many tulips are in the garden now?",
        "98",
    ),
    # 3 * 4 + 2 * 1.50 = 12 + 3 = 15; 20 - 15 = 5
    (
        "Mia buys 3 notebooks that cost $4 each and 2 pens that cost $1.50 each. She pays with a $20 bill. "
        "How many dollars of change does she get?",
        "5",
    ),
    # 27 - 9 + 14 = 32; half of 32 get off at the second stop: 32 - 16 = 16
    (
        "A bus starts its route with 27 passengers. At the first stop 9 people get off and 14 get on. At the "
        "second stop half of the passengers get off. How many passengers are still on the bus?",
        "16",
    ),
    # 8 * 5 = 40 litres a day; 40 * 2 = $80 a day; 80 * 7 = $560 a week
    (
        "A farmer gets 5 litres of milk from each of his 8 cows every day and sells the milk for $2 a litre. "
        "How many dollars does he earn from the milk in one week?",
        "560",
    ),
]


def steps_text(state: list[str]) -> str:
    """The steps as the reply writes them: "Step 1: ...\\nStep 2: ...\\n" ("" for none)."""
    return "".join(f"Step {i}: {step}\n" for i, step in enumerate(state, 1))


class Gsm8k(Task):
    name = "gsm8k"
    steps = 2  # the default problem's two calculations; --steps 3 for the three-step samples
    thought_tokens = 24  # one line: a calculation and a few words
    answer_tokens = 8  # the final number

    def thought_prompt(self, problem: Problem, state: list[str]) -> str:
        example = f"Question: {EXAMPLE_QUESTION}\n{steps_text(EXAMPLE_STEPS)}Answer: {EXAMPLE_ANSWER}"
        return f"{INSTRUCTION}\n\n{example}\n\nQuestion: {problem.text}"

    def thought_reply(self, problem: Problem, state: list[str]) -> str:
        return f"{steps_text(state)}Step {len(state) + 1}:"

    def clean_thought(self, text: str) -> str:
        """The step: the first line the model wrote after "Step k:", without a label it repeated; the rest (the
        next steps, an answer) is the next levels' to write."""
        lines = [line for line in text.splitlines() if line.strip()]
        return " ".join(_LABEL.sub("", lines[0]).split()) if lines else ""

    def check_thought(self, problem: Problem, state: list[str]) -> bool | None:
        """The newest step's arithmetic (arithmetic.verdict); an empty step, or one that repeats an earlier step,
        fails: it takes the chain no further."""
        step = state[-1]
        if not step or step in state[:-1]:
            return False
        return arithmetic.verdict(step)

    def eval_prompt(self, problem: Problem, state: list[str]) -> str:
        earlier = f"The steps so far:\n{steps_text(state[:-1])}" if len(state) > 1 else ""
        return (
            f"Given a question: {problem.text}\n{earlier}"
            f"The next step is: {state[-1] if state else ''}\n"
            "Please output a number between 1 and 10 to evaluate the step. "
            "The higher the number, the more help there is in answering the question.\n"
            "The number is:"
        )

    def parse_score(self, text: str) -> Score:
        return parse_number(text, lo=self.lowest, hi=10)

    @property
    def needs_answer(self) -> bool:
        return True

    def answer_prompt(self, problem: Problem, state: list[str]) -> str:
        return self.thought_prompt(problem, state)

    def answer_reply(self, problem: Problem, state: list[str]) -> str:
        return f"{steps_text(state)}Answer:"

    def final_answer(self, problem: Problem, state: list[str], answer_text: str | None) -> str:
        """The number the final generation opens with (the reply was opened at "Answer:"; what follows its first
        line is the model going on to another question); without one, the number the last step reached; with
        neither, what the model wrote (so the user sees why it is marked wrong)."""
        if answer_text is not None:
            number = extract_answer_number(answer_text.strip().split("\n", 1)[0])
            if number is not None:
                return number
        last = state[-1] if state else ""
        number = extract_answer_number(last.split("=")[-1])
        if number is not None:
            return number
        return " ".join((answer_text or last).split())

    def correct(self, problem: Problem, answer: str) -> bool | None:
        if problem.answer is None:
            return None
        gold = normalise_number(problem.answer)
        return gold is not None and extract_answer_number(answer) == gold

    def samples(self) -> list[Problem]:
        return [Problem(f"gsm8k-sample-{i}", question, answer) for i, (question, answer) in enumerate(SAMPLES, 1)]

    def load(self, rows: list[dict]) -> list[Problem]:
        """GSM8K's own rows: {"question": "...", "answer": "worked solution ... #### 72"} (an "id" is kept)."""
        problems = []
        for i, row in enumerate(rows):
            question, solution = text_field(row, i, "question"), text_field(row, i, "answer")
            marker = solution.rfind("####")
            gold = normalise_number(solution[marker + 4 :]) if marker >= 0 else None
            if gold is None:
                raise RowError(i, '"answer" must end with "#### <number>", as GSM8K writes the gold answer')
            problems.append(Problem(row_id(row, i, self.name), question, gold))
        return problems
