"""Chi-square tests for the sampling tests: exact p-values, cells pooled until each expects >= 5 draws.

The sampling tests compare the runtime's output with the exact target law of the sim models; these are
the statistics they use (stated thresholds and their justification live in each test's docstring).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


def chi2_sf(x: float, dof: int) -> float:
    """P(X >= x) for X ~ chi-square(dof): the regularised upper incomplete gamma Q(dof/2, x/2)."""
    a, z = dof / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    log_front = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1:  # series for P(a, z)
        term = total = 1.0 / a
        n = a
        while term > total * 1e-15:
            n += 1
            term *= z / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    # continued fraction for Q(a, z) (modified Lentz)
    tiny = 1e-300
    b = z + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_front) * h


def pooled_cells(counts: dict, probs: dict, n: int, min_expected: float = 5.0):
    """Group cells, least likely first, until each group expects >= ``min_expected`` of ``n`` draws.

    The usual validity condition of the chi-square approximation. Observed outcomes that have
    probability 0 are returned separately: a correct sampler never produces them.
    """
    impossible = {o: c for o, c in counts.items() if probs.get(o, 0.0) == 0.0}
    cells = sorted((p, o) for o, p in probs.items() if p > 0)
    groups, obs, exp = [], 0, 0.0
    for p, o in cells:
        obs += counts.get(o, 0)
        exp += n * p
        if exp >= min_expected:
            groups.append((obs, exp))
            obs, exp = 0, 0.0
    if exp > 0 or obs:
        if groups:
            o0, e0 = groups.pop()
            groups.append((o0 + obs, e0 + exp))
        else:
            groups.append((obs, exp))
    return groups, impossible


def chi2_statistic(groups: list[tuple[int, float]]) -> tuple[float, int]:
    return sum((o - e) ** 2 / e for o, e in groups), len(groups) - 1


def chi2_goodness_of_fit(samples: Iterable, probs: dict) -> tuple[float, int, float, dict]:
    """Pearson's test of ``samples`` against the exact distribution ``probs``: (stat, dof, p, impossible)."""
    counts = Counter(samples)
    n = sum(counts.values())
    groups, impossible = pooled_cells(counts, probs, n)
    stat, dof = chi2_statistic(groups)
    return stat, dof, chi2_sf(stat, dof), impossible


def markov_chi2(sequences: Iterable[Sequence[int]], prompts: Iterable[Sequence[int]],
                table: dict[tuple[int, int], np.ndarray]) -> tuple[float, int, float, int, dict]:
    """Test that every generated token was drawn from p(. | last two tokens).

    Under the null hypothesis (lossless sampling) each sequence is an order-2 Markov chain with the
    target's transition probabilities, and Pearson's statistic over the transition counts, summed
    over contexts, is asymptotically chi-square with sum(cells - 1) degrees of freedom (Anderson &
    Goodman 1957, "Statistical inference about Markov chains"). Returns (stat, dof, p, draws,
    impossible transitions).
    """
    per_context: dict[tuple[int, int], Counter] = {}
    draws = 0
    for seq, prompt in zip(sequences, prompts):
        context = list(prompt)
        for t in seq:
            per_context.setdefault((context[-2], context[-1]), Counter())[t] += 1
            context.append(t)
            draws += 1
    stat, dof, impossible = 0.0, 0, {}
    for ctx, counts in per_context.items():
        n = sum(counts.values())
        p = table[ctx]
        groups, bad = pooled_cells(counts, {t: float(p[t]) for t in range(len(p))}, n)
        impossible.update({(ctx, t): c for t, c in bad.items()})
        s, d = chi2_statistic(groups)
        stat, dof = stat + s, dof + d
    return stat, dof, chi2_sf(stat, max(dof, 1)), draws, impossible
