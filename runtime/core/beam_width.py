"""Dynamic beam width (§3.2 of the DSBD paper, Eq. 2-7): as many beams per layer as the draft is
likely to deliver.

A layer's m draft beams are tried in order against p' (see scheduler/beam_acceptance.py): p' starts
at p = p_beam, becomes norm(max(p' - q, 0)) after each rejection and is reset to p after each
acceptance. So the chance that the j-th draft tried since the last reset is accepted, given the
j - 1 before it were rejected, depends on j only (Eq. 4):

    alpha_j = sum_x q(x) min(1, p_j(x) / q(x)) = sum_x min(p_j(x), q(x)),
    p_1 = p,  p_{j+1} = norm(max(p_j - q, 0)).

The first acceptance among n drafts is the i-th with probability (Eq. 3)

    P~(i) = alpha_i prod_{j<i} (1 - alpha_j),

and after it the remaining n - i drafts start afresh, so the number k accepted among n has law
(Eq. 2, with the base cases the paper leaves implicit)

    P(n, k) = sum_{i=1}^{n} P~(i) P(n - i, k - 1),   P(n, 0) = prod_{j<=n} (1 - alpha_j),   P(0, 0) = 1.

The layer's width is the largest K that at least K drafts are accepted with probability >= t,
floored at W_min (Eq. 6-7):

    W~(t) = max{K : sum_{k>=K} P(m, k) >= t},   W_L = max(W_min, W~(t)).

(Eq. 5 of the paper sums the complement from k = 1; Eq. 7 from k = 0 is the right one: 1 - P(m, <K).)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DynamicWidth", "accepted_count_law", "acceptance_chain", "dynamic_width", "widest"]

TAIL_TOLERANCE = 1e-12  # a tail that equals t up to rounding counts as reaching it


def acceptance_chain(p: np.ndarray, q: np.ndarray, m: int) -> np.ndarray:
    """alpha_1..alpha_m of Eq. 4 for target p and draft q over the same cells (any shape, any scale)."""
    if m == 0:
        return np.zeros(0)
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    p, q = p / p.sum(), q / q.sum()
    alphas = np.ones(m)
    for j in range(m):
        alphas[j] = np.minimum(p, q).sum()
        rest = np.maximum(p - q, 0.0)
        if rest.sum() <= 0:  # p_j == q: alpha_j = 1, so no later draft of this round is ever tried
            break
        p = rest / rest.sum()
    return np.clip(alphas, 0.0, 1.0)


def accepted_count_law(alphas: np.ndarray) -> np.ndarray:
    """P(m, k) for k = 0..m (Eq. 2-3), m = len(alphas): the law of the number of drafts accepted when
    all m are tried (no stop at a width)."""
    m = len(alphas)
    survive = np.concatenate([[1.0], np.cumprod(1.0 - alphas)])  # survive[n] = P(n, 0)
    first = alphas * survive[:-1]                                   # first[i - 1] = P~(i)
    law = np.zeros((m + 1, m + 1))
    law[:, 0] = survive
    for n in range(1, m + 1):
        # P(n, k) = sum_i P~(i) P(n - i, k - 1): rows n-1, n-2, ..., 0 against P~(1), P~(2), ..., P~(n)
        law[n, 1:n + 1] = first[:n] @ law[n - 1::-1, :n]
    return law[m]


def widest(law: np.ndarray, threshold: float) -> int:
    """Eq. 7: the largest K with P(at least K accepted) = sum_{k>=K} law[k] >= threshold (K >= 0)."""
    tails = np.cumsum(law[::-1])[::-1]  # tails[K] = sum_{k>=K} law[k]
    return int(np.flatnonzero(tails >= threshold - TAIL_TOLERANCE).max(initial=0))


def dynamic_width(p: np.ndarray, q: np.ndarray, m: int, threshold: float, w_min: int) -> int:
    """Eq. 6: W_L = max(W_min, W~(t)) for a layer of m drafts drawn from q, verified against p."""
    return max(w_min, widest(accepted_count_law(acceptance_chain(p, q, m)), threshold))


@dataclass(frozen=True, slots=True)
class DynamicWidth:
    """The width rule of §3.2 for the forest verifier.

    ``bonus`` is the width of the layer drawn with no drafts, after the last accepted layer: the
    nominal W_L of Algorithm 1, line 34 (Eq. 6 with m = 0 would give W_min there).
    """
    threshold: float  # t in [0, 1]: the chance of accepting at least W_L drafts that W_L is set for
    w_min: int = 1    # W_min >= 1
    bonus: int = 2    # width of the bonus layer

    def __post_init__(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise ValueError(f"the width threshold t must be in [0, 1], got {self.threshold}")
        if self.w_min < 1 or self.bonus < 1:
            raise ValueError(f"widths must be >= 1, got w_min={self.w_min}, bonus={self.bonus}")

    def layer(self, p: np.ndarray, q: np.ndarray, m: int) -> int:
        return dynamic_width(p, q, m, self.threshold, self.w_min)
