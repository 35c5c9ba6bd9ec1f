"""Self-instructed training prompts: the target writes the problems and requests it is later asked.

Templated problems (`prompts.py`, `varied_prompts.py`) cover a few dozen story shapes; held-out
evaluation wraps real GSM8K questions, whose content is far more varied. Here the target itself
invents word problems (subject x style x name x item) and requests (stories, questions, Blocksworld
puzzles), sampled at T = 0.8; each usable text is then framed with a varied-wording ask and answered
by the target like any teacher prompt. Nothing here reads GSM8K, and a prompt that contains a
held-out phrasing is dropped.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from . import prompts as P
from .distill_data import load_records
from .teacher import answer_shards
from .varied_prompts import MATH_ASKS, OPENERS

SUBJECTS = ["money", "time and speed", "fractions", "percentages", "ages", "areas and perimeters", "recipes",
            "shopping", "savings", "travel distances", "school supplies", "farm animals", "a bake sale",
            "sports scores", "a garden", "paint and walls", "books and reading", "a birthday party",
            "a road trip", "a lemonade stand", "workers and wages", "a zoo", "tickets for a show", "pizza slices",
            "a train timetable", "a fish tank", "marbles", "a charity run", "stamps", "a library", "a bakery",
            "apples and oranges", "a parking lot", "phone plans", "a music festival", "a swimming pool"]
STYLES = ["short", "two-sentence", "multi-step", "tricky", "simple", "realistic", "everyday", "three-step"]
MATH_META = [
    "Write one new {st} math word problem about {subj}. Give only the problem, not the solution.",
    "Invent a {st} word problem with numbers about {name} and some {many}. Do not solve it.",
    "Create a grade-school math question about {subj} that needs more than one calculation. Only write the question.",
    "Write a {st} arithmetic story problem that a ten-year-old could solve. Mention {name}. Output just the problem.",
    "Make up a math problem about {subj} in the style of a school worksheet. No answer.",
]
REQUEST_META = [
    "Write a request someone might type to a chatbot asking for a story about {topic}.",
    "Write a question someone might ask an assistant about {topic}.",
    "Write an instruction asking an assistant to solve a puzzle about stacking {c1}, {c2} and {c3} blocks, "
    "describing where each block starts and where it should end up.",
    "Write a creative writing assignment about {topic}, as a teacher would phrase it.",
    "Write a homework question about {subj} that a student might paste into a chat.",
]
_PREAMBLE = re.compile(r"^(sure|here is|here's|okay|certainly)[^\n:]*[:\n]\s*", re.I)
_LABEL = re.compile(r"^\**\s*(word problem|math problem|problem|question|request|assignment|instruction)"
                    r"\s*\**\s*[:.]\s*\**\s*", re.I)
# Every literal piece (12+ characters) of a held-out instruction, e.g. "walk me through it."
_HELDOUT_FRAGMENTS = [f.strip().lower() for h in P.MATH_HELDOUT + P.PASSAGE_HELDOUT + P.BLOCKS_HELDOUT
                      for f in re.split(r"\{\w+\}", h) if len(f.strip()) >= 12]
_SOLUTION = re.compile(r"\n\s*(\*\*)?(solution|answer|step 1|to solve|let's|let me)", re.I)


def meta_prompts(n: int, *, seed: int) -> list[tuple[str, str]]:
    """`n` (family, instruction) pairs: two thirds ask for a math problem, one third for a request."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        family = "math" if rng.random() < 2 / 3 else "request"
        one, many = rng.choice(P.ITEMS)
        c = rng.sample(P.COLORS, 3)
        tpl = rng.choice(MATH_META if family == "math" else REQUEST_META)
        out.append((family, tpl.format(st=rng.choice(STYLES), subj=rng.choice(SUBJECTS), name=rng.choice(P.NAMES),
                                       many=many, topic=rng.choice(P.TOPICS), c1=c[0], c2=c[1], c3=c[2])))
    return out


def clean(text: str) -> str | None:
    """The usable prompt inside a generated text (preamble, label and any solution cut), or None."""
    t = _LABEL.sub("", _PREAMBLE.sub("", text.strip()).strip()).strip()
    t = _SOLUTION.split(t, maxsplit=1)[0].strip().strip('"').strip()
    if not 20 <= len(t) <= 700:
        return None
    if any(f in t.lower() for f in _HELDOUT_FRAGMENTS):
        return None
    return t


def frame(family: str, text: str, rng: random.Random) -> str:
    """A math problem gets an opener and a varied ask around it; a request is sent as written."""
    if family != "math":
        return text
    ask, opener = rng.choice(MATH_ASKS), rng.choice(OPENERS)
    return rng.choice([f"{opener}{text} {ask}", f"{opener}{ask}\n\n{text}", f"{opener}{text}\n\n{ask}", text])


def teacher_self_instruct(target: Path, out: Path, *, meta: int = 768, batch: int = 96, max_new: int = 192,
                          seed: int = 505, log=print) -> None:
    """Stage 1: the target writes `meta` problems/requests (T = 0.8; `meta_*.pt`, also teacher data), the
    usable ones are framed (`prompts.json`) and the target answers them (`gen_*.pt`, odd shards at
    T = 0.7). Resumable shard by shard."""
    pairs = meta_prompts(meta, seed=seed)
    answer_shards(target, out, [q for _, q in pairs], batch=batch, max_new=120, seed0=2000, prefix="meta",
                  sampled=lambda s: True, temperature=0.8, log=log)
    texts = [_decode(target, r) for r in load_records(out, "meta_*.pt")]
    rng = random.Random(seed)
    prompts = [frame(f, c, rng) for (f, _), t in zip(pairs, texts) if (c := clean(t))]
    (out / "prompts.json").write_text(json.dumps(prompts, indent=1))
    log(f"self-instruct: {len(prompts)}/{len(texts)} usable prompts")
    answer_shards(target, out, prompts, batch=batch, max_new=max_new, seed0=3000, log=log)


_TOKENIZERS: dict = {}


def _decode(target: Path, record: dict) -> str:
    if target not in _TOKENIZERS:
        from transformers import AutoTokenizer

        _TOKENIZERS[target] = AutoTokenizer.from_pretrained(target)
    return _TOKENIZERS[target].decode(record["ids"][record["start"]:].tolist(), skip_special_tokens=True)
