"""Training prompts in combinatorially varied wording (session 4), none of them a held-out phrasing.

The first teacher data used eight-ish fixed instructions per family, and the draft learnt those
wordings: on held-out wording its agreement with the target fell (see docs/models.md). Here every
prompt is an opener x an ask x a frame x a problem, so an instruction rarely repeats verbatim; the
problem generators are shared with `prompts.py`, plus eight more math story shapes.
"""

from __future__ import annotations

import random

from . import prompts as P

OPENERS = ["", "", "Hi! ", "Quick question. ", "Please help. ", "Math time: ", "My teacher gave us this: ",
           "From a worksheet: ", "Here's one for you. ", "Try this one. ", "Homework problem: ", "Okay, ",
           "I have a puzzle. ", "Practice question. ", "Exam prep: "]
MATH_ASKS = ["Solve it and show the working.", "What's the answer? Explain briefly.", "How would you approach this?",
             "Give the answer with a short explanation.", "Can you break it into steps?",
             "What should I calculate first?", "Explain the reasoning in plain words.", "Find the answer and check it.",
             "Work it out one step at a time.", "What is the first sub-question to answer, and its answer?",
             "Write out the calculations.", "Show me how to solve it.",
             "I got a different answer from my friend. What is right?", "Suggest two ways to solve it.",
             "Which operation comes first here, and why?", "Answer in a few lines.",
             "Can you explain this like I'm ten?", "Set up the equation and solve.", "What is the final number?",
             "Help me understand the steps.", "List the steps, then give the result."]
PASSAGE_ASKS = ["Write something about {t}.", "Tell me a short story about {t}.",
                "Can you write a few paragraphs on {t}?", "Draft an opening scene about {t}.",
                'I need a paragraph about {t} that ends with "{e}"', "Plan an essay about {t}: give the outline first.",
                "Describe {t} for a school magazine.", "Write about {t} in a calm tone.",
                "What could a story about {t} be about? Give ideas and pick one.",
                'Write the first page of a story about {t}. Finish with: "{e}"']
BLOCK_ASKS = ["What moves get me there?", "Give a sequence of legal moves.", "Which block should move first?",
              "How many moves are needed? List them.", "Plan it, one action per line, and explain.",
              "Is the first move I should make to unstack something?", "Suggest a plan and check each step.",
              "Solve the puzzle."]
BLOCK_FRAMES = ["Blocks: {s}. I want: {g}. {a}", "{o}The blocks are arranged so that {s}. Goal: {g}. {a}",
                "Start state — {s}. End state — {g}. {a}", "Puzzle: {s}; make it so that {g}. {a}",
                "We have some blocks where {s}. The target is {g}. {a}"]
MORE_MATH = [
    "A shirt costs ${x} and is on sale for {y}0% off. {a} buys {z} shirts. How much does {a} pay?",
    "{a} drives {x} miles per hour for {y} hours, then {z} hours more at half that speed. How far does {a} go?",
    "A garden is {x} meters long and {y} meters wide. Fencing costs ${z} per meter. What does it cost to fence it?",
    "{a} has ${x}0. {a} spends a quarter on lunch and {y} dollars on a book. How much is left?",
    "There are {x} {many} in a box. {b} takes {y} and {a} takes twice as many as {b}. How many remain?",
    "{a} saves ${y} every week. How many weeks until {a} has ${x}0?",
    "A class of {x} students goes on a trip. Each bus holds {z}{y} students. How many buses are needed?",
    "{a} bakes {x} {many} and sells them in bags of {y}. Each bag sells for ${z}. How much money does {a} make?",
]


def _math_problem(rng: random.Random) -> str:
    if rng.random() < 0.4:
        a, b = rng.sample(P.NAMES, 2)
        _, many = rng.choice(P.ITEMS)
        return rng.choice(MORE_MATH).format(a=a, b=b, many=many, x=rng.randint(3, 60), y=rng.randint(2, 9),
                                            z=rng.randint(2, 9))
    return P._math_problem(rng)


def varied_prompt(rng: random.Random) -> str:
    """One prompt: 55% math, 25% passages, 20% Blocksworld, each with a random opener, ask and frame."""
    family = rng.choices(["math", "passage", "blocks"], weights=[55, 25, 20])[0]
    opener = rng.choice(OPENERS)
    if family == "math":
        problem, ask = _math_problem(rng), rng.choice(MATH_ASKS)
        return rng.choice([f"{opener}{problem} {ask}", f"{opener}{ask}\n\n{problem}", f"{opener}{problem}\n\n{ask}",
                           f"{ask} {problem}"])
    if family == "passage":
        return opener + rng.choice(PASSAGE_ASKS).format(t=rng.choice(P.TOPICS), e=rng.choice(P.ENDINGS))
    start, goal = P._blocks_state(rng)
    return rng.choice(BLOCK_FRAMES).format(s=start, g=goal, a=rng.choice(BLOCK_ASKS), o=opener)


def varied_prompts(n: int, *, seed: int = 404) -> list[str]:
    """The first `n` prompts of the seeded list (the shipped draft used seed 404, 768 prompts)."""
    rng = random.Random(seed)
    return [varied_prompt(rng) for _ in range(n)]
