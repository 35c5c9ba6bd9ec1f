"""The prompts the feature draft's teacher answers, and the held-out prompts it is judged on.

The feature draft (feature_draft.py) learns to continue the target's own text, so its teacher data is
the target answering prompts like the ones a run gives it:
- **ToT thoughts and evaluations** (35 %): the three tasks' own prompt templates (runtime/apps/tot/), over
  generated problems: GSM8K-style questions from the project's story shapes (never GSM8K itself),
  Blocksworld instances from the seeded generator, creative end sentences. State: no thought yet, or one
  or two earlier thoughts taken from a fixed list.
- **Varied wording** (35 %): `varied_prompts`, the plain and the richer list.
- **Templated ToT-style prompts** (20 %): `train_prompts` (math, passages, plans, general chat).
- **Chat** (10 %): open requests, one sentence each.

Held-out prompts (`heldout_feature_prompts`) use wordings no training prompt uses and, for the ToT
thought prompts, real GSM8K *test* questions, which are never used for training.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from ...tot.blocks_plan import generate as blocks_instance
from ...tot.task import Problem
from ...tot.task_registry import get_task
from . import prompts as P
from .varied_prompts import RICHER_MATH, _story, varied_prompt

CHAT = [
    "What is a good way to start learning to cook?", "Give me three tips for a job interview.",
    "Why is the sky blue? Keep it short.", "Write a limerick about a {t}.", "How do plants make food?",
    "Suggest a name for a small bakery and say why.", "What should I pack for a weekend trip to the mountains?",
    "Explain the difference between weather and climate.", "Write a short thank-you note to a neighbour.",
    "How can I keep my houseplants alive?", "Describe {t} to someone who has never seen it.",
    "List some fun things to do on a rainy day.", "What makes a good friend?",
    "Write two sentences about {t} for a children's book.", "How does a bicycle stay upright?",
]
EARLIER_STEPS = [  # plausible earlier thoughts for a GSM8K path (state of one or two steps)
    "Sub-question: How many are there in total at the start?\nSub-answer: Adding the two amounts gives the total.",
    "Sub-question: How much does one cost?\nSub-answer: Dividing the total price by the count gives the price.",
    "Sub-question: How many are left after the first part?\nSub-answer: Subtracting what was used leaves the rest.",
]
MIX = {"tot": 35, "varied": 35, "templated": 20, "chat": 10}


def _tot_prompt(rng: random.Random, gsm8k_question: str | None = None) -> str:
    """A thought (or evaluation) prompt of one ToT task over a generated problem."""
    kind = rng.choices(["gsm8k", "blocksworld", "creative"], weights=[60, 25, 15])[0]
    task = get_task(kind)
    if kind == "gsm8k":
        text = gsm8k_question or (P._math_problem(rng) if rng.random() < 0.5 else varied_math(rng))
        problem, state = Problem("g", text), rng.sample(EARLIER_STEPS, rng.choice([0, 0, 1, 2]))
    elif kind == "blocksworld":
        instance = blocks_instance(rng.randrange(10**6), blocks=rng.choice([3, 4, 5]))
        problem, state = Problem("b", instance.statement, data=instance.to_json()), []
    else:
        problem, state = Problem("c", " ".join(rng.sample(P.ENDINGS, 4))), []
    if rng.random() < 0.2 and kind != "creative":
        return task.eval_prompt(problem, state or ["Sub-question: What is asked?\nSub-answer: The total."])
    return task.thought_prompt(problem, state)


def varied_math(rng: random.Random) -> str:
    """A word problem from the richer story shapes (varied_prompts.py)."""
    return _story(rng, RICHER_MATH)


def feature_prompts(n: int, *, seed: int = 2026) -> list[str]:
    """The first `n` prompts of the seeded list, in the MIX proportions. Prompt i depends only on (seed, i),
    so a longer list starts with the shorter one and shards already made stay valid."""
    return [feature_prompt(random.Random(seed * 1_000_003 + i)) for i in range(n)]


def feature_prompt(rng: random.Random) -> str:
    kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
    if kind == "tot":
        return _tot_prompt(rng)
    if kind == "varied":
        return varied_prompt(rng, richer=rng.random() < 0.5)
    if kind == "templated":
        return P.train_prompts(1, seed=rng.randrange(10**9))[0]
    return rng.choice(CHAT).format(t=rng.choice(P.TOPICS))


def heldout_feature_prompts(n: int, *, gsm8k: Path | None = None, seed: int = 7) -> list[tuple[str, str]]:
    """`n` (kind, prompt) pairs never trained on: half ToT thought prompts over GSM8K test questions (when
    the file is given), half the held-out wordings of prompts.py."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    if gsm8k is not None and gsm8k.is_file():
        rows = [json.loads(line) for line in gsm8k.read_text().splitlines() if line.strip()]
        task = get_task("gsm8k")
        for row in rng.sample(rows, n // 2):
            out.append(("tot", task.thought_prompt(Problem("t", row["question"].strip()), [])))
    out += P.heldout_tagged(n - len(out), seed=seed)
    return out


def heldout_tot_prompts(n: int, *, gsm8k: Path | None) -> list[str]:
    """The first `n` ToT thought prompts over GSM8K test questions of the held-out draw with seed 8 (the sampled
    evaluation's): a larger `n` starts with the smaller one's prompts."""
    return [p for kind, p in heldout_feature_prompts(4 * n, gsm8k=gsm8k, seed=8) if kind == "tot"][:n]
