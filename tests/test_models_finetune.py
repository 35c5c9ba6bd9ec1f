"""The finetune recipe: varied-wording prompts (never a held-out phrasing) and continued distillation."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
import torch
from test_models_draft import VOCAB, make_draft, target  # noqa: F401  (pytest fixture)

from specsched.runtime.apps.drafts.training import finetune as ft
from specsched.runtime.apps.drafts.training import prompts as P
from specsched.runtime.apps.drafts.training.distill_data import collate, to_example
from specsched.runtime.apps.drafts.training.finetune import FinetuneConfig, finetune
from specsched.runtime.apps.drafts.training.train import kd_loss, vocab_lut
from specsched.runtime.apps.drafts.training.varied_prompts import varied_prompts


def _skeleton(template: str) -> str:
    """A held-out template's fixed wording: the text between its {placeholders}, longest piece."""
    return max(re.split(r"\{\w\}", template), key=len).strip()


@pytest.mark.parametrize("richer", [False, True])
def test_varied_prompts_are_seeded_and_never_use_a_held_out_phrasing(richer):
    prompts = varied_prompts(2000, seed=405, richer=richer)
    assert prompts == varied_prompts(2000, seed=405, richer=richer) and prompts[:10] != varied_prompts(10, seed=1)
    assert len(set(prompts)) > 1900                                  # wording varies prompt to prompt
    held_out = [_skeleton(t) for t in P.MATH_HELDOUT + P.PASSAGE_HELDOUT + P.BLOCKS_HELDOUT]
    assert all(len(s) >= 12 for s in held_out)
    assert not [p for p in prompts if any(s in p for s in held_out)]
    families = {"math": "How", "blocks": "block", "passage": "about"}
    assert all(any(word in p for p in prompts) for word in families.values())
    assert any("jacket" in p for p in prompts) == richer              # `richer` adds the RICHER_MATH shapes


def test_the_prompt_list_the_shipped_draft_was_trained_on_is_unchanged():
    """The record in docs/models.md names seed 404 shards: those prompts must stay reproducible."""
    digest = hashlib.md5(json.dumps(varied_prompts(3840)).encode()).hexdigest()
    assert digest == "edceaf5bdb15d6c53e143200421a3413"


def _records(n: int, seed: int) -> list[dict]:
    """Teacher-like records over the tiny vocabulary: a repeating pattern the draft can learn."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = (torch.arange(24) * 7 + int(torch.randint(0, VOCAB, (1,), generator=g))) % VOCAB
        nxt = torch.cat([ids[1:], ids[:1]])
        top_ids = torch.stack([nxt, (nxt + 1) % VOCAB], 1).to(torch.int32)
        top_logp = torch.log(torch.tensor([[0.9, 0.1]])).expand(24, 2).half()
        out.append({"ids": ids.to(torch.int32), "start": 1, "top_ids": top_ids[:23], "top_logp": top_logp[:23]})
    return out


def _pattern_accuracy(draft) -> float:
    ids = torch.tensor([[5, 12, 19, 26, 33, 40]])
    with torch.no_grad():
        pred = draft(ids, use_cache=False).logits[0, :-1].argmax(-1)
    return (pred == ids[0, 1:]).float().mean().item()


def test_finetune_learns_the_teacher_and_keeps_the_inference_settings(target):  # noqa: F811
    torch.manual_seed(0)
    draft = make_draft(target, draft_vocab=VOCAB, int8=True)
    frozen, before = draft.embed.weight.clone(), _pattern_accuracy(draft)
    logged: list[str] = []
    cfg = FinetuneConfig(steps=120, lr=3e-3, new=3, old=2, corpus=1)
    finetune(draft, _records(16, 1), _records(16, 2), _records(4, 3), cfg, log=logged.append)
    assert [m.split()[1] for m in logged] == ["50/120", "100/120", "120/120"]
    assert before <= 0.4 and _pattern_accuracy(draft) >= 0.8           # it learnt the teacher's next tokens
    assert draft.cfg.int8 and not draft.training                       # ready for inference as shipped
    assert torch.equal(draft.embed.weight, frozen)                     # the target's embeddings stay frozen


def test_an_interrupted_finetune_resumes_to_the_same_weights(target, tmp_path, monkeypatch):  # noqa: F811
    data = _records(16, 1), _records(16, 2), _records(4, 3)
    cfg = FinetuneConfig(steps=12, lr=3e-3, new=3, old=2, corpus=1, ckpt_every_s=0.0)

    def fresh():
        torch.manual_seed(0)
        return make_draft(target, draft_vocab=VOCAB, int8=True)

    straight = finetune(fresh(), *data, cfg, log=lambda m: None)
    calls = {"n": 0}
    real_step = ft.kd_step

    def crash_at_8(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return real_step(*args, **kw)

    monkeypatch.setattr(ft, "kd_step", crash_at_8)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        finetune(fresh(), *data, cfg, ckpt=ckpt, log=lambda m: None)
    monkeypatch.setattr(ft, "kd_step", real_step)
    logged: list[str] = []
    resumed = finetune(fresh(), *data, cfg, ckpt=ckpt, log=logged.append)
    assert logged[0] == "resumed at step 7/12"
    assert all(torch.equal(a, b) for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()))
    with pytest.raises(ValueError, match="another recipe"):                # a changed recipe is not resumed
        finetune(fresh(), *data, FinetuneConfig(steps=13, lr=3e-3, new=3, old=2, corpus=1), ckpt=ckpt)


def test_the_hard_term_adds_the_cross_entropy_of_the_teachers_argmax(target):  # noqa: F811
    torch.manual_seed(0)
    draft = make_draft(target, draft_vocab=VOCAB // 2)
    lut = vocab_lut(draft)
    inside, outside = draft.vocab_ids[:2].tolist(), [t for t in range(VOCAB) if lut[t] < 0][:1]
    rec = _records(1, 5)[0]
    rec["top_ids"][:, 0] = torch.tensor([inside[0], outside[0]] * 11 + [inside[1]], dtype=torch.int32)
    batch = collate([to_example(rec, 64)], pad_id=0)
    with torch.no_grad():
        logq = torch.log_softmax(draft.draft_logits(batch["ids"])[0].float(), -1)[0]
        kl, both = kd_loss(draft, lut, batch), kd_loss(draft, lut, batch, hard=0.5)
    rows = batch["mask"][0].nonzero()[:, 0]
    top = lut[batch["top_ids"][0, rows, 0]]
    counted = (lut[batch["top_ids"][0, rows]] >= 0).any(-1).sum()    # rows with teacher mass in the vocabulary
    ce = -(logq[rows[top >= 0], top[top >= 0]]).sum() / counted       # argmax outside the vocabulary: no term
    assert torch.allclose(both - kl, 0.5 * ce, atol=1e-5) and ce > 0
