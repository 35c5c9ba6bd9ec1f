"""sampling.py's rules in torch, on the device where a draft model's logits already are, so that a drafted
chain is chosen without copying a logits row to the host at every step (device_chain.py).

The rules are sampling.py's, step for step and in float64 like there: temperature, then top-k (every logit
tied with the k-th is kept), then top-p (the smallest set of most likely tokens, ranked by a stable
descending sort, i.e. ties by id, whose mass reaches top_p), renormalised; the q returned is float32,
what travels. A draw is the inverse CDF of that float32 q at one uniform from the sequence's host RNG
stream: the host's draw at the same uniform. Only the last bits can differ (the device's exp and its
parallel cumulative sum round differently from numpy's, ~1e-16 of the mass, and a CUDA scan is not even
deterministic), which changes which q is sent, never the law: the token is still drawn from exactly the q
that travels with it, and that is all the verifier's acceptance rule needs. tests/test_device_chain.py
holds both sides to the same results.

Nothing here reads a value back to the host: a chain's steps queue without waiting (indexing with a
device scalar would, hence ``gather``).
"""

from __future__ import annotations

import torch

from ..core.sampling import SamplingParams


def distribution(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """One row of logits [V] -> the float32 distribution q after temperature, top-k and top-p."""
    z = logits.double() / params.temperature
    if params.top_k and params.top_k < z.shape[-1]:
        kth = torch.topk(z, params.top_k).values[-1]
        z = torch.where(z >= kth, z, float("-inf"))
    probs = torch.exp(z - z.max())
    probs = probs / probs.sum()
    if params.top_p < 1:
        ranked, order = torch.sort(probs, descending=True, stable=True)
        before = torch.cumsum(ranked, 0) - ranked  # mass strictly before each token
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(0, order, before < params.top_p)
        probs = torch.where(keep, probs, 0.0)
        probs = probs / probs.sum()
    return probs.float()


def draw(q: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The token at `uniform` (a float64 scalar in [0, 1)) of q's inverse CDF: sampling.sample's rule."""
    cdf = torch.cumsum(q.double(), 0)
    # a parallel scan may wobble by an ulp; flat over tokens with q = 0 and never falling, the CDF cannot
    # land a draw on a token q excludes (the host's sequential sum cannot either)
    cdf = torch.cummax(torch.where(q > 0, cdf, 0.0), 0).values
    at = torch.searchsorted(cdf, (uniform * cdf[-1]).reshape(1), right=True)[0]
    return at.clamp(max=q.shape[0] - 1)


def confidence_of(logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """The draft's probability of `token` at temperature 1, float32 (drafter.softmax's estimate)."""
    return torch.softmax(logits.float(), 0).gather(0, token.reshape(1))[0]
