"""Turning logits into the distribution we sample from, identically for draft (q) and target (p).

Speculative sampling is lossless only if p and q are shaped by the *same* temperature, top-k and
top-p, so both sides call ``distribution`` here (a draft chain on a GPU applies the same rules in
torch: runtime/backends/device_sampling.py, held to these by tests/test_device_chain.py).
Distributions are float32 (that is what travels on the wire); every use - sampling, acceptance
ratios, residuals - first normalises them in float64, so the q a worker sampled from is exactly the q
the verifier divides by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .config_checks import check_types
from .kinds import ConfigError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    FLAGS: ClassVar[dict[str, str]] = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
                                       "coupling": "coupling"}  # flat name -> field, as every part of a RunConfig

    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0            # 0 = off
    top_p: float = 1.0        # 1 = off
    coupling: str = "residual"  # how a sampled draft is accepted: residual | gumbel (runtime/core/coupling.py)

    def __post_init__(self) -> None:  # a ConfigError is a ValueError
        check_types(self)
        if self.coupling not in ("residual", "gumbel"):
            raise ConfigError(f"--coupling must be residual or gumbel, got {self.coupling!r}")
        if not math.isfinite(self.temperature):
            raise ConfigError(f"--temperature must be a finite number, got {self.temperature}")
        if self.temperature < 0:
            raise ConfigError(f"--temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def coupled(self) -> bool:
        """Sampled with Gumbel coupling: the draft's candidates and the target's token come from shared
        per-position noise, and a candidate is accepted iff it is the target's token (coupling.py)."""
        return self.coupling == "gumbel" and not self.greedy


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Rows of logits [..., V] -> rows of probabilities (float32) after temperature, top-k, top-p."""
    z = np.asarray(logits, dtype=np.float64) / params.temperature
    if params.top_k and params.top_k < z.shape[-1]:
        # keep the k largest logits; ties at the k-th value are all kept
        kth = np.partition(z, -params.top_k, axis=-1)[..., -params.top_k, None]
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    if params.top_p < 1:
        probs = nucleus(probs, params.top_p)
    return probs.astype(np.float32)


def nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    # Keep the smallest set of most likely tokens whose mass reaches top_p (the top token always).
    rows = probs.reshape(-1, probs.shape[-1])
    return np.stack([_nucleus_row(row, top_p) for row in rows]).reshape(probs.shape)


NUCLEUS_CANDIDATES = 256  # the most likely tokens ranked first: most nuclei are a few dozen


def _nucleus_row(p: np.ndarray, top_p: float) -> np.ndarray:
    """The definition: rank the ids by falling probability, ties by id (a stable sort), and keep each whose
    mass strictly before it is below top_p. A stable argsort of 49,152 ids costs ~4 ms, so the ranking is
    done in two cheaper ways that give its result bit for bit (tests/test_sampling_exact.py)."""
    keep = _kept_in_head(p, top_p)
    if keep is None:
        keep = kept_by_values(p, top_p)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum()


def _kept_in_head(p: np.ndarray, top_p: float) -> np.ndarray | None:
    """Rank the NUCLEUS_CANDIDATES largest only (~0.25 ms); when their running mass already exceeds top_p,
    every token after them has at least that mass before it and is dropped, exactly as after a full sort.
    The 1e-12 margin covers the rounding of `cumsum - p` (about 1e-16). None: the nucleus is wider."""
    if len(p) <= NUCLEUS_CANDIDATES:
        return None
    head = top_tokens(p, NUCLEUS_CANDIDATES)
    running = np.cumsum(p[head])
    if running[-1] <= top_p + 1e-12:
        return None
    keep = np.zeros(p.shape, dtype=bool)
    keep[head[running - p[head] < top_p]] = True
    return keep


def kept_by_values(p: np.ndarray, top_p: float) -> np.ndarray:
    """A wide nucleus (thousands of tokens at a high temperature): sort the values alone (a SIMD sort, ~0.2
    ms). Equal values are interchangeable, so the sorted values, their running sums and the kept positions
    are the stable sort's bit for bit. The kept positions are a prefix: the mass before a position never
    falls, even rounded, since with c' = fl(c + r') >= c and r' <= r (falling values) fl(c' - r') >=
    fl(c - r) (rounding is monotone; numpy's cumsum is sequential). So the kept ids are those above the
    last kept value and, of the ids equal to it, the lowest, as many as the prefix holds."""
    ranked = np.sort(p)[::-1]
    n = int(np.count_nonzero(np.cumsum(ranked) - ranked < top_p))  # mass strictly before each position
    cut = ranked[n - 1]
    keep = p > cut
    keep[np.flatnonzero(p == cut)[:n - int(np.count_nonzero(keep))]] = True
    return keep


def top_tokens(logits: np.ndarray, width: int) -> np.ndarray:
    """The `width` largest logits, best first, ties to the lower id: what a stable argsort of -logits
    starts with, without sorting the whole vocabulary (a stable argsort of 49,152 logits takes ~6 ms,
    three draft forwards' worth)."""
    if width == 1:
        return np.array([np.argmax(logits)])  # argmax returns the first maximum
    width = min(width, len(logits))
    kth = logits[np.argpartition(-logits, width - 1)[:width]].min()
    above = np.flatnonzero(logits > kth)
    chosen = np.concatenate([above, np.flatnonzero(logits == kth)[: width - len(above)]])
    return chosen[np.lexsort((chosen, -logits[chosen]))]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a probability row by inverse CDF (one uniform per draw: reproducible)."""
    return draw(probs, rng.random())


def draw(probs: np.ndarray, uniform: float) -> int:
    """The inverse-CDF draw at `uniform` in [0, 1): the first index whose running mass exceeds uniform x the
    total. Ids of zero mass never are: their running mass equals the one before them (adding 0.0 is exact), so
    a row restricted to its nonzero ids, in id order, draws the same id."""
    cdf = np.cumsum(probs, dtype=np.float64)
    return int(min(np.searchsorted(cdf, uniform * cdf[-1], side="right"), len(cdf) - 1))


def normalised(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    return row / row.sum()


def stream(seed: int, sequence: int, purpose: str, position: int | None = None) -> np.random.Generator:
    """An RNG stream owned by one sequence and one purpose: "draft", "verify" or "target"; for a beam
    sequence, the verifier's "beam" (a round's forest shuffle, acceptance and target draws) and
    "allocate" (how many nodes each tree of a round gets).

    Each sequence consumes its own streams in an order fixed by its own history, so its output does
    not depend on which policy ran or how drafts of different sequences were interleaved. With a
    `position` (tokens the sequence has committed; for "beam" and "allocate", the round) the stream is
    counter-based - Philox keyed by (seed, sequence, purpose, position) - so the draws at a position are
    a pure function of where the sequence stands, not of a generator's history: a process restarted
    mid-run draws exactly what the one it replaces would have drawn (runtime/engine/supervisor.py).
    """
    tag = {"draft": 1, "verify": 2, "target": 3, "beam": 5, "allocate": 6}[purpose]  # 4: beams.beam_stream
    if position is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, sequence, tag])))
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, sequence, tag, position])))
