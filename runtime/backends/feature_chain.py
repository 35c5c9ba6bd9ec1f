"""A feature draft's chain drawn over its own vocabulary: the rows stay S wide, not V.

The draft's logits are -inf outside its restricted vocabulary (4,096 of the target's 49,152 ids), so
everything TreeDrafter does with a row - the top token, the distribution after temperature, top-k and
top-p, the inverse-CDF draw, the confidence - has the same result on the S ids alone, in increasing id
order: ties go to the lower id either way; top-k and top-p rank the same finite values (S < k keeps them
all, as a V-wide top-k with k > S keeps every finite logit); a draw finds the same id (sampling.draw).
Only the sums that normalise q and the confidences are added in another order, so they agree to float32
rounding, as a chain drawn on a GPU does (device_chain.py); the verifier accepts against the q sent.
Writing rows out V wide cost a greedy chain step ~0.13 ms of 1.34 and a sampled one ~0.67 ms of 1.99 (2-vCPU
Intel Xeon, one thread, a 200-token context; benchmarks/feature_chain.py): the row, its scatter, and then
three passes over 49,152 floats in the drafter. The q rows travel over the support too
(DraftQ.support): 16 KiB a row, not 192.

The steps are TreeDrafter's for a chain (drafter.py), in the same order: the first read takes what the
cache has not yet read, each later one the token drawn before it (fed its predicted feature, as a
drafted entry is), the last token is not read; the i-th token is the guide's when it names one (q = δ,
a point mass, its uniform consumed unused as TreeDrafter._certain consumes it), else the argmax
(greedy) or a draw at uniforms[i].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.draft_q import DraftQ
from ..core.sampling import distribution, draw
from .backend import ChainPlan, DraftedChain


def draft_chain(model, cache, tokens: Sequence[int], plan: ChainPlan) -> DraftedChain:
    """`model` a FeatureModel and `cache` its FeatureCache (a plain sequence); see LanguageModel.draft_chain."""
    ids = model.support
    logits = model.narrow(cache, list(tokens))
    drawn: list[int] = []
    qs: list[np.ndarray | None] = []
    confs: list[float] = []
    for i in range(plan.k):
        hint = plan.guide(drawn) if plan.guide is not None else None
        q = None
        if hint is not None:
            x = hint
        elif plan.params.greedy:
            x = int(ids[np.argmax(logits)])  # the first maximum: the lowest id among equals
        else:
            q = distribution(logits[None], plan.params)[0]
            x = int(ids[draw(q, float(plan.uniforms[i]))])
        drawn.append(x)
        qs.append(q)
        confs.append(_confidence(logits, ids, x))
        if i + 1 < plan.k:
            logits = model.narrow(cache, [x], [len(cache) - 1])
    q_rows = None if plan.params.greedy else DraftQ.of(qs, len(ids), ids)
    return DraftedChain(np.asarray(drawn, np.int32), q_rows, np.asarray(confs, np.float32))


def _confidence(logits: np.ndarray, ids: np.ndarray, x: int) -> float:
    """softmax(logits) at token x (drafter.softmax over the V-wide row): 0 for an id outside the support."""
    at = int(np.searchsorted(ids, x))
    if at == len(ids) or ids[at] != x:
        return 0.0
    e = np.exp(logits - logits.max())
    return float(e[at] / e.sum())
