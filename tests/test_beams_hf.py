"""DSBD on the tiny transformers pair (tests/tiny_hf.py): real KV caches, padded batches and tree masks.

Logits are compared up to the fp32 rounding of a differently shaped forward (tests/fp32.py); a joint
log-probability sums one log-softmax entry per step, each off by at most twice that bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from beam_models import decode
from beam_views import AfterPrompt, assert_forest_read_as_plain_forwards
from fp32 import assert_close, tolerance

from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_decode import beam_decode, dsbd_decode
from tests.tiny_hf import make_pair

SHAPE = dict(layers=2, width=128)  # the tiny models' longest reduction, over 2 layers: see tests/fp32.py
GREEDY = SamplingParams(0.0)
PROMPTS = [[2, 3, 4], [7, 8, 9, 10, 11]]
STEPS = 8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from specsched.runtime.backends.hf_model import HFModel

    target, draft = make_pair(tmp_path_factory.mktemp("tiny"))
    return HFModel(str(target), "fp32"), HFModel(str(draft), "fp32")


@pytest.mark.parametrize("width", [1, 3])
def test_greedy_dsbd_is_beam_search_on_transformers(models, width):
    target, draft = models
    accepted = 0
    for prompt in PROMPTS:
        view = AfterPrompt.fresh_forwards(target, prompt)
        history, _ = decode(view, None, GREEDY, width=width, drafts=0, gamma=0, steps=STEPS,
                            rng=np.random.default_rng(0), ordered=True)
        atol = 2 * STEPS * tolerance(view.logits_after(prompt), **SHAPE)
        dsbd = dsbd_decode(target, draft, prompt, GREEDY, width, beams=width + 2, gamma=3, steps=STEPS,
                           seed=1, sequence=0)
        for got in (beam_decode(target, prompt, GREEDY, width, STEPS), dsbd):
            assert got.tokens == [list(s) for s, _ in history[-1]]
            np.testing.assert_allclose(got.logprobs, [lp for _, lp in history[-1]], rtol=0, atol=atol)
        accepted += sum(dsbd.stats.accept_counts[1:])
    assert accepted > 0  # draft layers were taken: the tree caches and their rollback were exercised


def test_the_verifier_reads_every_forest_node_as_a_plain_forward_would_on_transformers(models):
    assert_forest_read_as_plain_forwards(*models, lambda a, b: assert_close(a, b, **SHAPE))
