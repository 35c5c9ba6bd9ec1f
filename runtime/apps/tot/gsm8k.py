"""GSM8K: grade-school word problems, solved as a chain of three sub-questions with their sub-answers.

The SEED paper (Appendix C) asks for a sub-question, then separately for its sub-answer; here one
completion writes both ("Sub-question: ... Sub-answer: ..."), so a thought is one whole step and a
small model never sees half a step. The evaluator scores a step 1-10 for how much it helps; from the
best chain a last generation states the final number, which is checked against the gold answer.
"""

from __future__ import annotations

import re

from .parse import extract_answer_number, normalise_number, parse_number
from .rows import RowError, row_id, text_field
from .task import Problem, Score, Task

# the markers as the model may write them: "Sub-question:", "The sub-answer is:", "**Sub-question 2:**", and
# echoing the prompt's own words, "The previous sub-question is:" (SmolLM2-135M's favourite opening below T = 1:
# kept as text, a thought read "The previous" and stopped there)
# "1. The first sub-question:" too, the number at a line's start only: "= 1960.\nThe next sub-question is:" keeps 1960
_WHICH = r"(?:(?<![^\n])\d+[.)][ \t]*)?(?:the\s+)?(?:(?:next|previous|first)\s+)?"
_QUESTION = re.compile(rf"[*#]*{_WHICH}sub[-\s]?question\s*\d*\s*(?:is)?\s*:\**", re.I)
_ANSWER = re.compile(rf"[*#]*{_WHICH}sub[-\s]?answer\s*\d*\s*(?:is)?\s*:\**", re.I)

# Written for this project (not taken from GSM8K); each answer worked by hand in the comment.
SAMPLES = [
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


def _drop_lead(text: str) -> str:
    """Text without a leading "Sub-question:" (the model may repeat the prompt's lead-in)."""
    text = text.strip()
    lead = _QUESTION.match(text)
    return text[lead.end() :].strip() if lead else text


def split_step(thought: str) -> tuple[str, str]:
    """A thought "Sub-question: Q\\nSub-answer: A" -> (Q, A); A is "" when the model gave none."""
    marker = _ANSWER.search(thought)
    question = thought[: marker.start()] if marker else thought
    answer = thought[marker.end() :] if marker else ""
    return _drop_lead(question), answer.strip()


def _one_paragraph(text: str) -> str:
    """Up to the next sub-question or blank line, on one line: the model often goes on to a next step."""
    cut = _QUESTION.search(text)
    text = text[: cut.start()] if cut else text
    text = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    return " ".join(text.split())


class Gsm8k(Task):
    name = "gsm8k"
    steps = 3
    thought_tokens = 96  # a sub-question and its worked sub-answer
    answer_tokens = 48  # the final number, perhaps in a sentence

    def _steps_text(self, state: list[str]) -> str:
        return "\n".join(state) if state else "None yet."

    def thought_prompt(self, problem: Problem, state: list[str]) -> str:
        return (
            f"Given a question: {problem.text}\n"
            f"The previous sub-questions and sub-answers are:\n{self._steps_text(state)}\n"
            "Please output the next sub-question to further reason the question, and answer it. "
            "Use this format:\nSub-question: <the next sub-question>\nSub-answer: <its answer>\n"
            "Sub-question:"
        )

    def clean_thought(self, text: str) -> str:
        """One step, "Sub-question: Q\\nSub-answer: A", each on one line; whatever the model wrote after
        the first sub-answer (a next sub-question, a blank line and more) is dropped. Without a
        "Sub-answer:" the text (up to a blank line) is kept as the sub-question."""
        text = _drop_lead(text)
        marker = _ANSWER.search(text)
        if marker is None:
            return f"Sub-question: {_one_paragraph(text)}"
        question = " ".join(text[: marker.start()].split())
        return f"Sub-question: {question}\nSub-answer: {_one_paragraph(text[marker.end() :])}"

    def eval_prompt(self, problem: Problem, state: list[str]) -> str:
        question, answer = split_step(state[-1]) if state else ("", "")
        earlier = ""
        if len(state) > 1:
            earlier = f"The previous sub-questions and sub-answers are:\n{self._steps_text(state[:-1])}\n"
        return (
            f"Given a question: {problem.text}\n{earlier}"
            f"The sub-question is: {question}\nThe sub-answer is: {answer}\n"
            "Please output a number between 1 and 10 to evaluate the answer. "
            "The higher the number, the more help there is in answering the question.\n"
            "The number is:"
        )

    def parse_score(self, text: str) -> Score:
        return parse_number(text, lo=self.lowest, hi=10)

    @property
    def needs_answer(self) -> bool:
        return True

    def answer_prompt(self, problem: Problem, state: list[str]) -> str:
        return (
            f"Given a question: {problem.text}\n"
            f"The sub-questions and sub-answers are:\n{self._steps_text(state)}\n"
            "Please output the final answer to the question as a single number.\n"
            "The answer is:"
        )

    def final_answer(self, problem: Problem, state: list[str], answer_text: str | None) -> str:
        """The number in the final generation; without one, the number the last sub-answer reached;
        with neither, what the model wrote (so the user sees why it is marked wrong)."""
        if answer_text is not None:
            number = extract_answer_number(answer_text)
            if number is not None:
                return number
        last = split_step(state[-1])[1] if state else ""
        number = extract_answer_number(last)
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
