"""A draft chain drawn where a transformers draft model runs: its q rows leave the device once per draft.

Through ``forward`` each draft step copies its logits row to the host (V floats: 192 KiB at V = 49,152),
waits for it, chooses there, and copies the chosen token back up for the next step: k waits for a chain
of k. Here the k forwards are queued on the process's stream back to back, each fed the token the step
before chose on the device (device_sampling.py), and the tokens, their q rows and confidences come down
together at the end: one wait per draft. Prompt lookup reads the drafted text, so with --lookup each
drawn token id also comes down as it is drawn (8 bytes and a wait; q still comes down once). A token
the guide named was drawn from δ: a point mass (DraftQ), which has no row to bring down.

The steps are TreeDrafter's for a chain (drafter.py), in the same order: the first forward reads what the
cache has not yet read, each later one the token drawn before it, the last token is not read; the i-th
token is the guide's when it names one (q = δ, a point mass), else the model's argmax (greedy) or a draw at uniforms[i].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..core.device import device_chains
from ..core.draft_q import DraftQ
from ..core.sampling import SamplingParams
from ..models.growing_cache import GrowingCache, cache_out
from . import device_sampling as ds
from .backend import ChainPlan, DraftedChain


def wanted(cuda: bool) -> bool:
    """Whether a model draws its chains here: on CUDA, unless SPECSCHED_DEVICE_CHAINS=0 (the host path, to
    time one against the other); =1 takes this path on the CPU too (the tests; docs/gpu.md)."""
    setting = device_chains()
    return cuda if setting == "" else setting == "1"


@torch.inference_mode()
def draft_chain(model, cache, tokens: Sequence[int], plan: ChainPlan) -> DraftedChain:
    """`model` an HFModel and `cache` its HFCache (a plain sequence); see LanguageModel.draft_chain."""
    place, n, start = model.placement, len(tokens), len(cache)
    with place.running():
        ids = place.up(torch.tensor([list(tokens)], dtype=torch.long))
        # every position of the draft's forwards goes up at once: the pending tokens', then k - 1 drafted
        positions = place.up(torch.arange(start, start + n + plan.k - 1).unsqueeze(0))
        uniforms = None if plan.uniforms is None else place.up(torch.from_numpy(plan.uniforms).double())
        past = cache.past if cache.past is not None else GrowingCache()
        read = positions[:, :n]
        drawn, qs, confs, known = [], [], [], []  # known: the drafted ids on the host (the guide reads them)
        points = []  # whether each token is the guide's, drawn from δ
        for i in range(plan.k):
            out = model.model(input_ids=ids, position_ids=read, use_cache=True, **model.with_cache(past),
                              **model.keep_last(1))
            past = cache_out(out)
            logits = out.logits[0, -1]
            hint = plan.guide(known) if plan.guide is not None else None
            x, q = _choose(place, logits, plan.params, None if uniforms is None else uniforms[i], hint)
            if plan.guide is not None and i + 1 < plan.k:  # the guide reads it before the next token
                known.append(hint if hint is not None else place.token(x))
            drawn.append(x)
            confs.append(ds.confidence_of(logits, x))
            points.append(hint is not None)
            if q is not None:
                qs.append(q)
            ids, read = x.view(1, 1), positions[:, n + i:n + i + 1]
        cache.past = past
        q_rows = torch.stack(qs) if qs else torch.zeros((0, model.vocab_size), device=place.device)
        host_tokens, conf, q = place.down_all(torch.stack(drawn).int(), torch.stack(confs), q_rows)
    cache.append([*tokens, *host_tokens[:-1].tolist()], None)  # what the forwards read, as forward() records it
    return DraftedChain(host_tokens, None if plan.params.greedy else DraftQ(q, np.array(points, dtype=bool)), conf)


def _choose(place, logits: torch.Tensor, params: SamplingParams, uniform: torch.Tensor | None, hint: int | None):
    """The next token (a device scalar): the guide's `hint`, else the model's; and the q row it was drawn from
    (None when greedy, or for the guide's token: δ, a point mass)."""
    if hint is not None:
        return place.up(torch.tensor(hint, dtype=torch.long)), None
    if params.greedy:
        return torch.argmax(logits), None  # the first maximum, as sampling.top_tokens(logits, 1)
    q = ds.distribution(logits, params)
    return ds.draw(q, uniform), q
