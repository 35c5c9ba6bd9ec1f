"""Self-instructed prompts: the target's own problems, cleaned, framed, never a held-out phrasing."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from specsched.runtime.models import prompts as P
from specsched.runtime.models.distill_data import load_records
from specsched.runtime.models.self_instruct import clean, frame, meta_prompts, teacher_self_instruct
from specsched.runtime.models.tiny import ASSET_DIR


def test_meta_prompts_are_seeded_and_mostly_ask_for_math_problems():
    pairs = meta_prompts(600, seed=5)
    assert pairs == meta_prompts(600, seed=5) and pairs[:20] != meta_prompts(20, seed=6)
    share = sum(f == "math" for f, _ in pairs) / len(pairs)
    assert 0.6 < share < 0.73                                     # two thirds math, the rest requests
    assert all("solution" in q.lower() or "answer" in q.lower() or "not solve" in q.lower()
               or "only" in q.lower() or "just" in q.lower() for f, q in pairs if f == "math")


def test_clean_keeps_the_problem_and_cuts_preamble_label_and_solution():
    text = "Sure! Here's a problem for you:\n\n**Problem:** Mia has 12 pears and gives 5 away. How many are left?" \
           "\n\nSolution: 12 - 5 = 7"
    assert clean(text) == "Mia has 12 pears and gives 5 away. How many are left?"
    assert clean("Question: A bus carries 40 people; 3 buses leave. How many people left?\nLet's see: 120") \
        == "A bus carries 40 people; 3 buses leave. How many people left?"
    assert clean("Okay:\n\nToo short.") is None                   # under 20 characters is not a prompt
    assert clean("x" * 800) is None


def test_a_text_that_contains_a_held_out_phrasing_is_dropped():
    for template in P.MATH_HELDOUT + P.PASSAGE_HELDOUT + P.BLOCKS_HELDOUT:
        text = template.format(p="Sam has 3 red apples.", t="a lighthouse", e="The end.", s="A is on B", g="B on A")
        assert clean(text) is None, template
    assert clean("Sam has 3 red apples and eats one. How many are left now?") is not None


def test_frame_wraps_math_in_a_varied_ask_and_leaves_requests_alone():
    rng = random.Random(0)
    problem = "Ana buys 4 pens at $2 each. What does she pay?"
    framed = {frame("math", problem, rng) for _ in range(60)}
    assert all(problem in f for f in framed) and len(framed) > 20
    assert frame("request", "Tell me about owls.", rng) == "Tell me about owls."


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory) -> Path:
    """The shipped tiny target with a plain chat template (the teacher wraps every prompt in one)."""
    out = tmp_path_factory.mktemp("tiny-chat")
    shutil.copytree(ASSET_DIR / "target", out, dirs_exist_ok=True)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def test_self_instruct_teacher_writes_resumable_deterministic_shards(chat_target, tmp_path):
    logged: list[str] = []
    teacher_self_instruct(chat_target, tmp_path, meta=8, batch=4, max_new=10, seed=3, log=logged.append)
    prompts = json.loads((tmp_path / "prompts.json").read_text())
    gens = sorted(tmp_path.glob("gen_*.pt"))
    assert sorted(p.name for p in tmp_path.glob("meta_*.pt")) == ["meta_00000.pt", "meta_00001.pt"]
    assert len(gens) == len(prompts) // 4 and f"{len(prompts)}/8 usable" in " ".join(logged)
    for rec in load_records(tmp_path, "*.pt"):
        n = len(rec["ids"]) - rec["start"]
        assert n >= 1 and rec["top_ids"].shape == (n, 8) and (rec["top_logp"] <= 0).all()
    assert len(gens) == 2                                              # the tiny target's texts all pass
    # Resume: a rerun generates only what is missing, and a greedy shard comes back identical.
    first = torch.load(gens[0])["records"]
    gens[0].unlink()
    logged.clear()
    teacher_self_instruct(chat_target, tmp_path, meta=8, batch=4, max_new=10, seed=3, log=logged.append)
    assert [m.split(":")[0] for m in logged if "tokens in" in m] == [f"{tmp_path.name}/gen_00000.pt"]
    again = torch.load(gens[0])["records"]
    assert [r["ids"].tolist() for r in again] == [r["ids"].tolist() for r in first]
