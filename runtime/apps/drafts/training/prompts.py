"""Tree-of-Thoughts-style prompts for distillation and for the held-out evaluation.

The workloads are ToT searches over GSM8K-style arithmetic, short passages and Blocksworld plans; a ToT
step asks the model to propose sub-questions, answer one, continue a plan or judge a partial state.
Prompts are sampled from templates whose wording is split in two disjoint families: `train` phrasings
feed the teacher, `heldout` phrasings (plus real GSM8K test questions) only the evaluation, so the quality
bar measures generalisation to new wording rather than template recall.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = [
    "Ava",
    "Ben",
    "Carla",
    "Dev",
    "Elif",
    "Femi",
    "Gus",
    "Hana",
    "Ivan",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
    "Nia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Uma",
    "Viktor",
    "Wen",
    "Yusuf",
    "Zoe",
]
ITEMS = [
    ("apple", "apples"),
    ("marble", "marbles"),
    ("book", "books"),
    ("cookie", "cookies"),
    ("sticker", "stickers"),
    ("pencil", "pencils"),
    ("egg", "eggs"),
    ("card", "cards"),
    ("shell", "shells"),
    ("cupcake", "cupcakes"),
    ("toy car", "toy cars"),
    ("bottle", "bottles"),
]
TOPICS = [
    "a lighthouse keeper",
    "the first snow of winter",
    "a lost umbrella",
    "a city bakery at dawn",
    "a chess tournament",
    "a robot learning to paint",
    "an old library",
    "a river journey",
    "a failed experiment",
    "a market in the rain",
    "a long train ride",
    "a garden in spring",
    "a broken clock",
    "a school science fair",
    "a mountain village",
    "the night shift at a hospital",
    "a letter never sent",
    "a street musician",
    "moving to a new country",
    "a power outage",
]
ENDINGS = [
    "It was not the end, only a pause.",
    "Nobody noticed the door was open.",
    "The smell of bread filled the street.",
    "She finally understood the map.",
    "Everything was quiet again.",
    "He laughed for the first time that year.",
    "The numbers did not add up.",
    "By morning, the snow had covered every track.",
]
COLORS = ["red", "blue", "green", "yellow", "orange", "purple", "white", "black"]


def _math_problem(rng: random.Random) -> str:
    """A GSM8K-style word problem from one of several story shapes."""
    a, b = rng.sample(NAMES, 2)
    one, many = rng.choice(ITEMS)
    x, y, z = rng.randint(3, 60), rng.randint(2, 12), rng.randint(2, 9)
    price = rng.choice([2, 3, 4, 5, 6, 8, 10, 12, 15])
    shapes = [
        f"{a} has {x} {many}. {b} gives {a} {y} more, and then {a} shares them equally among {z} friends. "
        f"How many {many} does each friend get, and how many are left over?",
        f"{a} buys {y} packs of {many}. Each pack has {z} {many} and costs ${price}. How many {many} does "
        f"{a} have, and how much money did {a} spend?",
        f"A shop sold {x} {many} on Monday, twice as many on Tuesday and {y} fewer on Wednesday than on "
        f"Tuesday. How many {many} did the shop sell in the three days?",
        f"{a} reads {y} pages a day for {z} days and then {x} pages on the last day. The book has "
        f"{y * z + x + rng.randint(5, 40)} pages. How many pages are left?",
        f"{a} is {y} years older than {b}. In {z} years {a} will be {x + y + z} years old. How old is {b} now?",
        f"A tank holds {x * 10} liters. It is filled at {y} liters per minute and leaks {z % y + 1} liters per "
        f"minute. How long does it take to fill the empty tank?",
        f"{a} earns ${price * 2} per hour and works {y} hours a week for {z} weeks. {a} spends ${x} in total "
        f"on bus tickets. How much does {a} save?",
        f"There are {x} students in a class. {y * 2} percent of them walk to school, and half of the rest take "
        f"the bus. How many students take the bus?",
        f"{a} and {b} collected {x} {many} together. {a} collected {y} more than {b}. How many did each collect?",
        f"A recipe needs {y} {many} for every {z} people. How many {many} are needed for {z * x} people?",
    ]
    return rng.choice(shapes)


def _blocks_state(rng: random.Random) -> tuple[str, str]:
    """A random Blocksworld start description and a goal over 3-5 coloured blocks."""
    blocks = rng.sample(COLORS, rng.randint(3, 5))
    order = blocks[:]
    rng.shuffle(order)
    stacks: list[list[str]] = [[]]
    for blk in order:
        if stacks[-1] and rng.random() < 0.4:
            stacks.append([])
        stacks[-1].append(blk)
    facts = []
    for st in stacks:
        facts.append(f"the {st[0]} block is on the table")
        facts += [f"the {up} block is on the {down} block" for down, up in zip(st, st[1:])]
        facts.append(f"the {st[-1]} block is clear")
    goal = rng.sample(blocks, len(blocks))
    goal_facts = [f"the {up} block is on the {down} block" for down, up in zip(goal, goal[1:])]
    return ", ".join(facts), " and ".join(goal_facts)


# Each family: a sampler returning the problem text and the instruction phrasings per split.
MATH_TRAIN = [
    "Solve this problem step by step.\n\n{p}",
    "Question: {p}\nBreak the question into smaller sub-questions and answer each one in turn.",
    "{p}\n\nPropose the next step of the solution, then carry it out.",
    "Here is a math word problem:\n{p}\nList three different sub-questions that would help solve it.",
    "{p}\nThink carefully and show your reasoning before giving the final answer.",
    'Problem: {p}\nA student started with: "First, work out the total." Continue the solution.',
    "Read the problem and write the equation you would use, then solve it.\n{p}",
    "{p}\nIs the answer a whole number? Explain your reasoning.",
]
MATH_HELDOUT = [
    "Could you help me with this? {p} Walk me through it.",
    "Consider the following. {p} What sub-question should be answered first, and what is its answer?",
    "I am stuck on a homework question: {p} Please explain how to get the answer.",
    "Task: work out the result and justify each calculation.\n\n{p}",
]
PASSAGE_TRAIN = [
    'Write a short passage about {t} in four paragraphs. The last paragraph must end with: "{e}"',
    "Make a plan for a short story about {t}, then write the first paragraph.",
    'Write a coherent paragraph about {t} that ends with the sentence "{e}"',
    "Describe {t} in a few sentences, using vivid details.",
    "Give three possible openings for a story about {t}.",
    "Write a brief essay on {t}. Keep it under 200 words.",
]
PASSAGE_HELDOUT = [
    'Compose a little tale centred on {t}, closing with the line "{e}"',
    "I'd like a few paragraphs on {t}. Outline them first, then draft them.",
    "Produce a vivid scene involving {t} for a creative writing class.",
]
BLOCKS_TRAIN = [
    "I am playing with a set of blocks. Initially, {s}. My goal is to have {g}. Give a plan of actions "
    "(pick up, put down, stack, unstack) to reach the goal.",
    "Blocksworld. Current state: {s}. Goal: {g}. What is the next action, and why?",
    "Initial state: {s}.\nGoal: {g}.\nList the plan step by step, one action per line.",
    "State: {s}. Goal: {g}. Evaluate how close the current state is to the goal.",
    "You can pick up a clear block, unstack a clear block from another, put a block down on the table or "
    "stack it on a clear block. Start: {s}. Target: {g}. Write the shortest plan.",
]
BLOCKS_HELDOUT = [
    "Here's a blocks puzzle. Right now {s}. I want {g}. How should I move the blocks?",
    "Planning problem: starting from a world where {s}, reach a world where {g}. Propose the first two "
    "moves and check that each is legal.",
]
GENERAL_TRAIN = [
    "Explain what {t} might teach a child.",
    "Summarize the idea of {t} in one paragraph.",
    "List five facts or details one might notice about {t}.",
    "Write a haiku about {t} and explain it.",
]


def _fill(rng: random.Random, family: str, split: str) -> str:
    if family == "math":
        tpl = rng.choice(MATH_TRAIN if split == "train" else MATH_HELDOUT)
        return tpl.format(p=_math_problem(rng))
    if family == "passage":
        tpl = rng.choice(PASSAGE_TRAIN if split == "train" else PASSAGE_HELDOUT)
        return tpl.format(t=rng.choice(TOPICS), e=rng.choice(ENDINGS))
    if family == "blocks":
        tpl = rng.choice(BLOCKS_TRAIN if split == "train" else BLOCKS_HELDOUT)
        s, g = _blocks_state(rng)
        return tpl.format(s=s, g=g)
    return rng.choice(GENERAL_TRAIN).format(t=rng.choice(TOPICS))


def train_prompts(n: int, *, seed: int = 0) -> list[str]:
    """`n` training prompts: 45% math, 25% passages, 20% Blocksworld, 10% general chat."""
    rng = random.Random(seed)
    families = rng.choices(["math", "passage", "blocks", "general"], weights=[45, 25, 20, 10], k=n)
    return [_fill(rng, fam, "train") for fam in families]


def heldout_family(n: int, family: str, *, seed: int = 1) -> list[str]:
    """`n` held-out prompts of one family ("math", "passage" or "blocks"): one ToT task's workload."""
    rng = random.Random(seed)
    return [_fill(rng, family, "heldout") for _ in range(n)]


def heldout_tagged(n: int, *, seed: int = 1, gsm8k: Path | None = None) -> list[tuple[str, str]]:
    """`n` (family, prompt) pairs in held-out wording; half are real GSM8K test questions when given."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    if gsm8k is not None and gsm8k.is_file():
        rows = [json.loads(line) for line in gsm8k.read_text().splitlines() if line.strip()]
        for row in rng.sample(rows, n // 2):
            out.append(("math", rng.choice(MATH_HELDOUT).format(p=row["question"].strip())))
    while len(out) < n:
        family = rng.choice(["math", "passage", "blocks"])
        out.append((family, _fill(rng, family, "heldout")))
    return out


def heldout_prompts(n: int, *, seed: int = 1, gsm8k: Path | None = None) -> list[str]:
    """The prompts of `heldout_tagged` (the quality bar's evaluation prompts)."""
    return [text for _, text in heldout_tagged(n, seed=seed, gsm8k=gsm8k)]
