"""What a target forward costs, measured while it runs: t(tokens, rows) = a + b·tokens + c·(rows − 1).

SEED and PCT treat the target's forward time as a constant s_t. On a CPU it is not: a forward is
roughly linear in the tokens it reads (a 5-token verify cost ~1.7 one-token forwards on a 2-core
machine), so how much to draft depends on that slope. The verifier times every forward it runs and
keeps a least-squares fit of

    seconds ≈ a + b·tokens + c·(rows − 1)

(`tokens` counts the padded batch, rows × longest row, which is what the model computes), with
exponential forgetting (half-life `HALF_LIFE` forwards) so the fit follows a machine whose speed
drifts. A small ridge term pulls b and c towards 0 until the forwards seen vary in size, and a fit
never goes negative. Prefills (forwards whose longest row reads more than `DECODE_TOKENS` tokens) are
left out: the curve describes the decode regime, where drafting decisions are made.

The fit travels with every verdict (`CostCurve.to_list`), so draft workers shape their drafts by it,
and it ends in each job's record (`specsched run` prints it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HALF_LIFE = 256       # forwards: older timings weigh half as much after this many newer ones
DECODE_TOKENS = 64    # forwards reading more tokens than this (prefills) are not fitted
RIDGE = 1e-3          # pulls b and c towards 0 while the sizes seen do not tell them apart


@dataclass(frozen=True, slots=True)
class CostCurve:
    a: float          # seconds: the fixed part of a forward (the weights streamed once)
    b: float          # seconds per token read
    c: float          # seconds per extra batch row
    forwards: int = 0  # how many forwards the fit has seen

    def time(self, tokens: int, rows: int = 1) -> float:
        return self.a + self.b * tokens + self.c * (rows - 1)

    def to_list(self) -> list[float]:
        return [self.a, self.b, self.c, float(self.forwards)]

    @classmethod
    def from_list(cls, values) -> CostCurve | None:
        if not values or len(values) != 4:
            return None
        a, b, c, n = (float(v) for v in values)
        return cls(a, b, c, int(n))

    def describe(self) -> str:
        return (f"{1e3 * self.a:.2f} ms + {1e3 * self.b:.3f} ms/token + {1e3 * self.c:.3f} ms/extra row "
                f"({self.forwards} forwards)")


class CostFit:
    """Weighted least squares over (1, tokens, rows − 1) -> seconds, updated one forward at a time."""

    def __init__(self, half_life: float = HALF_LIFE) -> None:
        self.decay = 0.5 ** (1.0 / half_life)
        self.xtx = np.zeros((3, 3))
        self.xty = np.zeros(3)
        self.forwards = 0

    def add_forward(self, row_lengths: list[int], seconds: float) -> None:
        """A forward over rows of these lengths: the model computes rows × the longest (padding)."""
        self.add(max(row_lengths) * len(row_lengths), len(row_lengths), seconds)

    def add(self, tokens: int, rows: int, seconds: float) -> None:
        if tokens > DECODE_TOKENS * rows or seconds <= 0:  # a row longer than a decode step's: a prefill
            return
        x = np.array([1.0, float(tokens), float(rows - 1)])
        self.xtx = self.decay * self.xtx + np.outer(x, x)
        self.xty = self.decay * self.xty + x * seconds
        self.forwards += 1

    def curve(self) -> CostCurve | None:
        if self.forwards == 0:
            return None
        weight = self.xtx[0, 0]
        ridge = np.diag([0.0, RIDGE * weight, RIDGE * weight])
        a, b, c = np.linalg.solve(self.xtx + ridge + 1e-12 * np.eye(3), self.xty)
        b, c = max(b, 0.0), max(c, 0.0)
        if b == 0.0 or c == 0.0:  # refit the fixed part with the clipped slopes
            a = (self.xty[0] - b * self.xtx[0, 1] - c * self.xtx[0, 2]) / weight
        return CostCurve(max(float(a), 0.0), float(b), float(c), self.forwards)
