"""What a batched forward costs, for the what-if simulator: t(tokens, rows) = a + b·tokens + c·(rows − 1),
fitted from a trace's own verifications (runtime/core/costs.py is the same curve, fitted live).

The live fit in a record is a poor guide for batches when the run verified one draft at a time: every forward
read about k + 1 tokens, so the split between a and b is decided by noise (a 2-vCPU sim run fitted
2.1 ms + 1.6 ms/token for a forward that costs 8 ms whatever it reads), and c never shows. So the trace's
forwards are fitted again - each the verifier's own forward time (its resample apart), its rows and their
padded tokens (rows × the longest row, a row being a draft and the last committed token) - and a slope is
kept only where the forwards seen tell it apart from noise: more than twice its standard error. A first
round's forwards read their prompts (prefills) and are left out, as the live fit leaves them.
"""

from __future__ import annotations

import numpy as np

from ...core.costs import CostCurve
from ...core.events import Event

SIGNIFICANT = 2.0   # a slope is kept when it exceeds this many standard errors


def batch_extra(cost: CostCurve | None, lengths: list[int]) -> float:
    """The extra time of one forward over drafts of these lengths, over the longest alone: a padded forward
    reads rows × (longest + 1) tokens, so t(R·L, R) − t(L, 1) = b·(R − 1)·L + c·(R − 1)."""
    if cost is None or len(lengths) < 2:
        return 0.0
    longest = max(lengths) + 1
    return cost.time(len(lengths) * longest, len(lengths)) - cost.time(longest, 1)


def fit_cost(events: list[Event], lengths: dict[tuple[int, int], int]) -> CostCurve | None:
    """The curve from the verifier's forwards; `lengths`: each (sequence, round)'s draft length, round 0 absent
    (its forward reads the prompt). None when fewer than three forwards can be used."""
    forwards = {e.start: e.duration for e in events if e.role == "verifier" and e.kind == "verify"}
    rounds: dict[int, int] = {}
    rows: dict[float, list[int | None]] = {}
    for v in sorted((e for e in events if e.role == "draft" and e.kind == "verify"), key=lambda e: e.start):
        rnd = rounds.get(v.seq, 0)
        rounds[v.seq] = rnd + 1
        rows.setdefault(v.start, []).append(lengths.get((v.seq, rnd)))
    used = [(len(r), len(r) * (max(r) + 1), forwards[t]) for t, r in rows.items()
            if t in forwards and None not in r]
    if len(used) < 3:
        return None
    x = np.array([[1.0, tokens, n - 1.0] for n, tokens, _ in used])
    y = np.array([s for _, _, s in used])
    keep = [0, 1, 2]
    while True:  # backward elimination: the least told-apart slope goes, then the fit again; a stays
        coef, se = least_squares(x[:, keep], y)
        weak = [(coef[i] / se[i], i) for i, j in enumerate(keep) if j and not coef[i] > SIGNIFICANT * se[i]]
        if not weak:
            break
        keep.pop(min(weak)[1])
    full = dict(zip(keep, coef))
    return CostCurve(max(full.get(0, 0.0), 0.0), full.get(1, 0.0), full.get(2, 0.0), len(used))


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ordinary least squares: the coefficients and their standard errors (infinite where x cannot tell)."""
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - x.shape[1]
    if dof <= 0:
        return coef, np.full(len(coef), np.inf)
    sigma2 = float(np.sum((y - x @ coef) ** 2)) / dof
    gram = x.T @ x
    if np.linalg.matrix_rank(gram) < gram.shape[0]:
        return coef, np.full(len(coef), np.inf)
    return coef, np.sqrt(np.maximum(np.diag(np.linalg.inv(gram)) * sigma2, 0.0))
