"""The quality bar's breakdown: α per prompt family and the tokens the draft's vocabulary cannot propose."""

from __future__ import annotations

import torch

from specsched.runtime.models.evaluation.evaluate import Decode, Row, by_family


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
