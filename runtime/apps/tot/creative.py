"""Creative Writing: a passage of four short paragraphs ending in four given sentences.

As in the SEED paper (Appendix C), one thought step writes a plan and the passage together
("Plan: ... Passage: ..."), the evaluator gives the passage a coherency score from 1 to 10, and the best
passage is the answer; there is no gold answer to check.

`--data` rows: {"sentences": ["...", "...", "...", "..."]} (exactly four), or {"input": "..."} holding
the four sentences as one string, as the Tree-of-Thoughts data file has them; an "id" is kept.
"""

from __future__ import annotations

import re

from .parse import parse_number
from .rows import RowError, row_id, text_field
from .task import Problem, Score, Task

# the markers as the model may write them: "Plan:", "**Plan:**", "## Passage:"
_OUTPUT_IS = re.compile(r"^\s*the\s+output\s+is\s*:", re.I)
_PLAN = re.compile(r"^[\s*#]*plan\s*:\**", re.I)
_PASSAGE = re.compile(r"[*#]*\bpassage\s*:\**", re.I)
_NEXT_PLAN = re.compile(r"\n[\s*#]*plan\s*:", re.I)

# Written for this project: four end sentences per problem.
SAMPLES = [
    [
        "The kettle began to whistle just as the power went out.",
        "Nobody in the village had ever seen a purple fox.",
        "She folded the old map and put it back in the drawer.",
        "By morning, the snow had covered every footprint.",
    ],
    [
        "The last train of the night left without a single passenger.",
        "He had never tasted bread that smelled of the sea.",
        "Every clock in the museum stopped at exactly noon.",
        "The letter was signed with a name she did not recognise.",
    ],
    [
        "A small robot sat on the bench, waiting for the rain to stop.",
        "The garden grew twice as fast that summer.",
        "Grandfather said the piano could only be played on Sundays.",
        "When the lights came back on, the cake was gone.",
    ],
    [
        "The lighthouse keeper counted the ships every evening.",
        "Nobody remembered who had planted the lemon tree.",
        "The chess match lasted longer than the storm.",
        "At last, the bridge was finished.",
    ],
    [
        "My sister learned to juggle in a single afternoon.",
        "The desert road went on without a single sign.",
        "A cat walked into the library and never left.",
        "The song on the radio was one he had written years ago.",
    ],
]


def split_thought(thought: str) -> tuple[str, str]:
    """A thought "Plan: P\\n\\nPassage: T" -> (P, T); P is "" when the model wrote no plan."""
    text = _OUTPUT_IS.sub("", thought, count=1)  # the model may repeat the prompt's lead-in
    marker = _PASSAGE.search(text)
    if marker is not None:
        return _PLAN.sub("", text[: marker.start()], count=1).strip(), text[marker.end() :].strip()
    if _PLAN.match(text):  # a plan cut off before its passage began
        return _PLAN.sub("", text, count=1).strip(), ""
    return "", text.strip()


class Creative(Task):
    name = "creative"
    steps = 1
    thought_tokens = 256  # a plan and four short paragraphs
    eval_tokens = 48  # room for a short analysis before "Thus the coherency score is N"

    def thought_prompt(self, problem: Problem, state: list[str]) -> str:
        return (
            "Write a coherent passage of 4 short paragraphs. The end sentence of each paragraph must be: "
            f"{problem.text}\n"
            "Make a plan then write. Your output should be of the following format:\n\n"
            "Plan:\nYour plan here.\n\nPassage:\nYour passage here.\n\n"
            "The output is:"
        )

    def clean_thought(self, text: str) -> str:
        """The first plan and its passage, as "Plan: P\\n\\nPassage: T"; a second "Plan:" the model starts
        after its passage is dropped. Text with no markers at all is taken as the passage."""
        plan, passage = split_thought(text)
        cut = _NEXT_PLAN.search(passage)
        passage = passage[: cut.start()].strip() if cut else passage
        return f"Plan: {plan}\n\nPassage: {passage}" if plan else f"Passage: {passage}"

    def eval_prompt(self, problem: Problem, state: list[str]) -> str:
        passage = split_thought(state[-1])[1] if state else ""
        return (
            f"Analyze the passage:\n{passage or '(no passage)'}\n\n"
            'then at the last line conclude "Thus the coherency score is [s]", where [s] is an integer from 1 to 10.\n'
            "The coherency score is:"
        )

    def parse_score(self, text: str) -> Score:
        return parse_number(text, lo=self.lowest, hi=10)

    def final_answer(self, problem: Problem, state: list[str], answer_text: str | None) -> str:
        """The passage of the best state (its plan is a means, not the answer)."""
        return split_thought(state[-1])[1] if state else ""

    def samples(self) -> list[Problem]:
        return [
            Problem(f"creative-sample-{i}", " ".join(s), data={"sentences": list(s)}) for i, s in enumerate(SAMPLES, 1)
        ]

    def load(self, rows: list[dict]) -> list[Problem]:
        problems = []
        for i, row in enumerate(rows):
            if "sentences" in row:
                sentences = row["sentences"]
                if (
                    not isinstance(sentences, list)
                    or len(sentences) != 4
                    or not all(isinstance(s, str) and s.strip() for s in sentences)
                ):
                    raise RowError(i, '"sentences" must be a list of exactly 4 non-empty strings')
                problems.append(
                    Problem(
                        row_id(row, i, self.name),
                        " ".join(s.strip() for s in sentences),
                        data={"sentences": [s.strip() for s in sentences]},
                    )
                )
            elif "input" in row:
                problems.append(Problem(row_id(row, i, self.name), text_field(row, i, "input").strip()))
            else:
                raise RowError(i, 'a creative row needs "sentences" (a list of 4 strings) or "input" (one string)')
        return problems
