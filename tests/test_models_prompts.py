"""Distillation data: held-out prompts are worded unlike any training prompt; vocab choice is sane."""

from __future__ import annotations

import json

import torch

from specsched.runtime.apps.drafts.training import prompts as P
from specsched.runtime.apps.drafts.training.distill_data import choose_vocab


def _stem(template: str) -> str:
    return template.split("{")[0].strip() or template.split("}")[-1].strip()


def test_heldout_wording_never_used_for_training() -> None:
    train = P.train_prompts(2000, seed=0)
    for held in (*P.MATH_HELDOUT, *P.PASSAGE_HELDOUT, *P.BLOCKS_HELDOUT):
        stem = _stem(held)
        assert stem and not any(stem in t for t in train), stem
    assert not set(P.heldout_prompts(200)) & set(train)


def test_prompt_lists_are_seeded() -> None:
    assert P.train_prompts(50, seed=3) == P.train_prompts(50, seed=3)
    assert P.train_prompts(50, seed=3) != P.train_prompts(50, seed=4)


def test_choose_vocab_ranks_target_output_first_and_fills_up() -> None:
    gen = [{"ids": torch.tensor([90, 91, 7, 7, 7, 8]), "start": 2}]
    vocab = choose_vocab(gen, [], [[9]], size=6, always=[99], vocab_size=100)
    assert vocab.tolist() == sorted(vocab.tolist()) and len(set(vocab.tolist())) == 6
    assert {7, 8, 9, 99} <= set(vocab.tolist()) and 90 not in vocab  # prompt ids (90, 91) are not output


def test_heldout_prompts_carry_the_family_they_were_written_for(tmp_path) -> None:
    gsm8k = tmp_path / "gsm8k.jsonl"
    questions = [f"Ann has {n} pears and eats one. How many are left?" for n in range(2, 32)]
    gsm8k.write_text("".join(json.dumps({"question": q}) + "\n" for q in questions))
    tagged = P.heldout_tagged(40, gsm8k=gsm8k)
    assert [text for _, text in tagged] == P.heldout_prompts(40, gsm8k=gsm8k)
    templates = {"math": P.MATH_HELDOUT, "passage": P.PASSAGE_HELDOUT, "blocks": P.BLOCKS_HELDOUT}
    stems = {family: [_stem(t) for t in ts] for family, ts in templates.items()}
    for family, text in tagged:
        assert any(stem in text for stem in stems[family]), (family, text)
    assert sum(any(q in text for q in questions) for _, text in tagged) == 20  # half of them, all "math"
    assert {family for family, _ in tagged} == {"math", "passage", "blocks"}
