"""Training prompts in combinatorially varied wording, none of them a held-out phrasing.

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

# The "richer" prompts (seed 405): more story shapes with GSM8K-like multi-step structure
# (rates, percentages, fractions, unit prices, schedules), plus more asks and openers.
RICHER_MATH = [
    "{a} buys {y} notebooks at ${z} each and {x} pencils at 50 cents each. {a} pays with a $100 bill. "
    "How much change does {a} get?",
    "A bakery makes {x}0 rolls a day. It sells {y}0% of them in the morning and half of the rest in the "
    "afternoon. How many rolls are left at the end of the day?",
    "{a} runs {y} miles on weekdays and {z} miles on each weekend day. How many miles does {a} run in {x} weeks?",
    "A farmer has {x} cows and {y} times as many chickens. Each cow eats {z} kg of feed a day and each chicken "
    "eats 0.1 kg. How much feed is needed per day?",
    "{a} is reading a {x}0-page book. On Monday {a} reads a fifth of it, and on Tuesday {a} reads {y}0 pages. "
    "How many pages are left?",
    "Tickets cost ${z} for adults and ${y} for children. A group of {x} people with {y} children buys tickets. "
    "What is the total cost?",
    "{a} fills {y} boxes with {x} {many} each and then gives away {z} boxes. How many {many} does {a} keep?",
    "A train leaves at 9:{y}5 and the trip takes {z} hours and {x} minutes. When does it arrive?",
    "{a} earns ${x} a day mowing lawns and saves two thirds of it. How many days until {a} can buy a ${y}00 bike?",
    "A rectangle is {x} cm long and {y} cm wide. A square has the same perimeter. What is the area of the square?",
    "{a} had {x} {many}. {a} lost {y}, then bought {z} packs of {y}. {b} has twice as many as {a} now. "
    "How many does {b} have?",
    "The price of a jacket is ${x}0. It goes up by 10% and then down by {y}0%. What is the final price?",
    "{a}'s car uses {z} liters of fuel per 100 km. Fuel costs ${y} per liter. What does a {x}0 km trip cost?",
    "In a class of {x}, there are {y} more girls than boys. How many boys are there?",
    "{a} plants {y} rows of {x} tulips. A rabbit eats {z} tulips from every row. How many tulips are left?",
    "{a} is {y} times as old as {b}. In {z} years their ages will add up to {x}. How old is {b} now?",
    "A printer prints {x} pages a minute. How long does it take to print {y} copies of a {z}0-page report?",
    "{a} sells lemonade for ${z} a cup. Each cup costs 40 cents to make. {a} sells {x} cups. What is the profit?",
    "A pool holds {x}00 gallons and is {y}0% full. How many more gallons fill it to the top?",
    "{a} splits ${x}0 between {b} and a friend so that {b} gets ${y} more than the friend. How much does each get?",
    "A movie starts at 7:{y}0 pm and lasts {x}0 minutes more than {z} hours. What time does it end?",
    "{a} walks {y} km in {z} hours. At the same speed, how long does a {x} km walk take?",
    "A store has {x} {many}. It sells a third of them on Monday and {y} on Tuesday. How many are left?",
    "{a} wants to buy {y} gifts for ${z}{x} each but has a coupon for ${x} off the total. What does {a} pay?",
]
RICHER_ASKS = ["Please explain each step.", "Can you check my thinking and give the answer?",
               "What's the quickest way to get the answer?", "Show your math.", "I need the answer and why.",
               "Write the solution like a teacher would.", "Go step by step and box the final answer.",
               "Explain it briefly, then give the number.", "Solve and double-check.",
               "How do I figure this out?", "What do I need to work out first?", "Teach me how to do this one."]
RICHER_OPENERS = ["Hey, ", "Need help: ", "Stuck on this. ", "For class: ", "Riddle me this. ", "Help! ",
                  "Can you do this? ", "Word problem: ", "One more: ", "Tutor mode please. "]


def _math_problem(rng: random.Random, richer: bool = False) -> str:
    if richer and rng.random() < 0.5:
        return _story(rng, RICHER_MATH)
    if rng.random() < 0.4:
        return _story(rng, MORE_MATH)
    return P._math_problem(rng)


def _story(rng: random.Random, shapes: list[str]) -> str:
    """One of `shapes` with two names, an item and three small numbers filled in."""
    a, b = rng.sample(P.NAMES, 2)
    _, many = rng.choice(P.ITEMS)
    return rng.choice(shapes).format(a=a, b=b, many=many, x=rng.randint(3, 60), y=rng.randint(2, 9),
                                     z=rng.randint(2, 9))


def varied_prompt(rng: random.Random, richer: bool = False) -> str:
    """One prompt: 55% math, 25% passages, 20% Blocksworld, each with a random opener, ask and frame
    (`richer`: also the RICHER_* shapes, asks and openers)."""
    family = rng.choices(["math", "passage", "blocks"], weights=[55, 25, 20])[0]
    opener = rng.choice(OPENERS + RICHER_OPENERS if richer else OPENERS)
    if family == "math":
        problem, ask = _math_problem(rng, richer), rng.choice(MATH_ASKS + RICHER_ASKS if richer else MATH_ASKS)
        return rng.choice([f"{opener}{problem} {ask}", f"{opener}{ask}\n\n{problem}", f"{opener}{problem}\n\n{ask}",
                           f"{ask} {problem}"])
    if family == "passage":
        return opener + rng.choice(PASSAGE_ASKS).format(t=rng.choice(P.TOPICS), e=rng.choice(P.ENDINGS))
    start, goal = P._blocks_state(rng)
    return rng.choice(BLOCK_FRAMES).format(s=start, g=goal, a=rng.choice(BLOCK_ASKS), o=opener)


def varied_prompts(n: int, *, seed: int = 404, richer: bool = False) -> list[str]:
    """The first `n` prompts of the seeded list (the plain list: seed 404; the richer one: seed 405)."""
    rng = random.Random(seed)
    return [varied_prompt(rng, richer) for _ in range(n)]
