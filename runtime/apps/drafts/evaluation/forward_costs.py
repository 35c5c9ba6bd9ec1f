"""What one forward of each model costs, timed the way serial speculative decoding calls them."""

from __future__ import annotations

import statistics
import time

import torch
from transformers.cache_utils import DynamicCache

from ....models.growing_cache import GrowingCache, cache_keyword


def crop_to(cache: DynamicCache, keep: int) -> None:
    """Drop cached tokens beyond the first `keep`."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)  # transformers >= 5: a negative argument removes that many tokens


@torch.inference_mode()
def forward_costs(target, draft, *, context: int = 128, rounds: int = 40, k: int = 4) -> tuple[float, float]:
    """Median wall times (ms) of a 1-token target forward and a 1-token draft forward after `context`
    cached tokens, called the way serial SD calls them: one target forward, then k draft forwards, repeated.
    Pairing them this closely matters on a shared host, whose speed was seen to drift by 1.7x within a
    minute. One draft forward in k follows the target's (whose 0.5 GB of weights flush the CPU caches) and
    is cold, as in SD; every timed token is new to the draft, so none reads a cached embedding row. Both
    make the draft's median a little pessimistic."""
    if k < 1:
        raise ValueError("k must be >= 1")
    vocab = min(target.config.vocab_size, draft.config.vocab_size)
    caches = {}
    keyword = {"target": cache_keyword(target), "draft": cache_keyword(draft)}
    for name, model in (("target", target), ("draft", draft)):
        caches[name] = GrowingCache()  # what the runtime's workers use
        model(torch.arange(context)[None] % vocab, use_cache=True, **{keyword[name]: caches[name]})
    times: dict[str, list[float]] = {"target": [], "draft": []}
    for r in range(rounds + 2):  # the first 2 rounds warm up
        for name, model, calls in (("target", target, 1), ("draft", draft, k)):
            for j in range(calls):
                t0 = time.perf_counter()
                model(torch.tensor([[(r * 7 + j + 3) % vocab]]), use_cache=True, **{keyword[name]: caches[name]})
                if r >= 2:
                    times[name].append(time.perf_counter() - t0)
                crop_to(caches[name], context)
    return 1e3 * statistics.median(times["target"]), 1e3 * statistics.median(times["draft"])
