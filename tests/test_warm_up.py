"""A model's warm-up (LanguageModel.warm_up, run by every child before it says ready) leaves nothing behind:
the forwards after it read exactly what they would have read without it."""

from __future__ import annotations

import numpy as np
import pytest

from specsched.runtime.backends.backend import get_backend
from specsched.runtime.core.config import RunConfig

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def _read(model, tokens: list[int], step: int) -> np.ndarray:
    cache = model.new_cache()
    first = model.forward(cache, tokens)
    return np.concatenate([first, model.forward(cache, [step])])


@pytest.mark.parametrize("config", [RunConfig.of(backend="sim", sim_vocab=64, sim_draft_ms=0, sim_verify_ms=0),
                                    RunConfig.of(backend="hf", target="tiny")], ids=["sim", "hf-tiny"])
@pytest.mark.parametrize("role", ["target", "draft"])
def test_a_warmed_model_reads_what_a_cold_one_reads(config: RunConfig, role: str) -> None:
    backend = get_backend(config)
    cold, warm = getattr(backend, role)(), getattr(backend, role)()
    warm.warm_up()
    assert np.array_equal(_read(cold, PROMPT, 7), _read(warm, PROMPT, 7))
