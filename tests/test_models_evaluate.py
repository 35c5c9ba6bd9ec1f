"""The quality bar: its loop (the runtime's drafter and verifier rule), α per prompt family and the tokens
the draft's vocabulary cannot propose."""

from __future__ import annotations

import torch
from fp32 import assert_greedy_equal

from specsched.runtime.apps.drafts.evaluation.evaluate import (
    STOP_BELOW,
    Decode,
    LookupDrafter,
    Row,
    by_family,
    chain,
    decode,
)
from specsched.runtime.core.config import AUTO_LOOKUP


def _rows() -> dict[str, Row]:
    # three prompts: math, blocks, math
    ar = Row("ar", [Decode([1, 2, 3, 50], 1.0), Decode([4, 5], 1.0), Decode([60, 61], 1.0)])
    sd = Row("sd", [Decode([], 1.0, proposed=8, accepted=2), Decode([], 1.0, 4, 4), Decode([], 1.0, 4, 1)])
    hy = Row("sd+lookup", [Decode([], 1.0, 8, 4), Decode([], 1.0, 4, 4), Decode([], 1.0, 4, 3)])
    return {"ar": ar, "sd": sd, "sd+lookup": hy}


def test_by_family_pools_the_prompts_of_each_family() -> None:
    out = by_family(["math", "blocks", "math"], _rows(), torch.tensor([1, 2, 3, 4, 5]))
    assert list(out) == ["math", "blocks"]
    # math: accepted (2 + 1) of proposed (8 + 4); with lookup (4 + 3) of 12
    assert out["math"] == {"prompts": 2, "alpha sd": 0.25, "alpha sd+lookup": 0.583, "outside_vocab": 0.5}
    assert out["blocks"] == {"prompts": 1, "alpha sd": 1.0, "alpha sd+lookup": 1.0, "outside_vocab": 0.0}


def test_a_full_vocabulary_draft_reports_no_vocabulary_share() -> None:
    out = by_family(["math", "blocks", "math"], _rows(), None)
    assert "outside_vocab" not in out["math"] and out["math"]["alpha sd"] == 0.25


PROMPTS = ["The river ran past the old mill and", "She opened the letter, read it twice, and", "In the morning the"]


@torch.inference_mode()
def test_the_evaluation_loop_decodes_what_transformers_decodes_and_speculation_changes_nothing() -> None:
    """The quality bar's loop is the runtime's drafter and verifier rule in one process: its AR tokens are
    transformers' greedy tokens, and every drafter leaves them unchanged while the draft is accepted."""
    from transformers import AutoTokenizer

    from specsched.runtime.apps.drafts.training.tiny import ASSET_DIR
    from specsched.runtime.backends.hf_model import HFModel

    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "target")
    target, draft = HFModel(str(ASSET_DIR / "target"), "fp32"), HFModel(str(ASSET_DIR / "draft"), "fp32")
    prompts = [tok.encode(p) for p in PROMPTS]
    ar = [decode(target, ids, 24).tokens for ids in prompts]
    reference = [target.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
                 for ids in prompts]

    def logits_after(i: int, prefix: list[int]):
        return target.model(torch.tensor([prompts[i] + prefix])).logits[0, -1].numpy()

    assert_greedy_equal(ar, reference, logits_after, layers=4, width=192)
    drafters = {"sd": lambda ids: chain(draft, ids, 4), "lookup": lambda ids: LookupDrafter(ids, 4),
                "sd+lookup+stop": lambda ids: chain(draft, ids, 4, lookup=AUTO_LOOKUP, min_confidence=STOP_BELOW)}
    for name, make in drafters.items():
        runs = [decode(target, ids, 24, make(ids)) for ids in prompts]
        assert_greedy_equal([r.tokens for r in runs], ar, logits_after, layers=4, width=192)
        accepted, proposed = sum(r.accepted for r in runs), sum(r.proposed for r in runs)
        assert 0 <= accepted <= proposed, name
    sd = [decode(target, ids, 24, chain(draft, ids, 4)) for ids in prompts]
    assert sum(r.accepted for r in sd) > 0  # the trained draft follows the target some of the time
    assert sum(r.verifies for r in sd) < sum(len(r.tokens) for r in sd)  # so a forward yields > 1 token
