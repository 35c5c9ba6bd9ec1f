"""Which drafter a worker drafts with: a tree of a fixed shape (drafter.py) or one shaped by expected gain (pct.py)."""

from __future__ import annotations

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.sampling import SamplingParams
from .drafter import Drafter, TreeDrafter
from .pct import PctDrafter


def make_drafter(model: LanguageModel, params: SamplingParams, rng: np.random.Generator, prompt: list[int],
                 *, k_config: tuple[int, ...], replacement: bool = True, lookup: int = 0,
                 min_confidence: float = 0.0, pct: tuple[int, int, float] | None = None,
                 calibration=None, clocks: tuple[int, int] = (0, 0)) -> Drafter:
    """A fixed shape (`k_config`), or with `pct` = (top-k, depth, floor) a tree shaped by expected gain (with
    `calibration`, the bins it learns from, shared across the sequences of one worker). `clocks`: the job's
    seed and the sequence's index in it, which key the race a coupled draft runs (coupling.py)."""
    if pct is not None:
        top_k, depth, floor = pct
        drafter: Drafter = PctDrafter(model, params, rng, prompt, top_k=top_k, depth=depth, floor=floor,
                                      replacement=replacement, lookup=lookup, calibration=calibration)
    else:
        drafter = TreeDrafter(model, params, rng, prompt, k_config=k_config, replacement=replacement,
                              lookup=lookup, min_confidence=min_confidence)
    drafter.clocks = clocks
    return drafter
