"""The synthetic backend: exact, seeded language models over a small vocabulary. numpy only.

Target logits for a context are ``s * g_t(ctx)``, draft logits ``s * (a * g_t(ctx) + (1 - a) *
g_d(ctx))``, where ``g_t``, ``g_d`` are standard-normal vectors drawn from an RNG seeded by the
model seed and the last ``ORDER`` tokens, ``s`` is a sharpness and ``a`` is ``--sim-agreement``:
a = 1 makes the draft the target (every draft token accepted), a = 0 an unrelated model. Because
the distributions are exact functions of the context, tests can compute the true probability of
any output and check sampled outputs against it.

A forward sleeps ``--sim-draft-ms`` / ``--sim-verify-ms`` (simulated compute that leaves the CPU
free) whatever the number of tokens: like a memory-bound accelerator, a k-token verification costs
one forward. A batched forward also costs one forward.
"""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Sequence

import numpy as np

from .backend import Backend, Cache, LanguageModel, Tokenizer

ORDER = 2          # the next-token distribution depends on the last ORDER tokens
SHARPNESS = 2.5    # logit scale: makes distributions peaked enough for useful drafts
EOS = 0
EOS_PENALTY = 3.0  # keeps sequences long: EOS is e^-3 times as likely as a typical token
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "be", "do", "fu", "ga", "hi", "jo", "pe", "zu"]


class SimModel(LanguageModel):
    def __init__(self, vocab: int, seed: int, agreement: float, cost_ms: float, *, draft: bool) -> None:
        self.vocab_size = vocab
        self.eos_token_id = EOS
        self.seed = seed
        self.agreement = agreement if draft else 1.0
        self.cost_s = cost_ms / 1000
        self.forwards = 0

    def logits_for(self, context: Sequence[int]) -> np.ndarray:
        """The exact next-token logits after ``context`` (float32 [V], read-only)."""
        return self._logits(tuple(int(t) for t in context[-ORDER:]))

    @functools.lru_cache(maxsize=1 << 16)  # noqa: B019 - a few models per process, never freed anyway
    def _logits(self, tail: tuple[int, ...]) -> np.ndarray:
        g = _normal(self.seed, 0, list(tail), self.vocab_size)
        if self.agreement < 1:
            g = self.agreement * g + (1 - self.agreement) * _normal(self.seed, 1, list(tail), self.vocab_size)
        z = SHARPNESS * g
        z[EOS] -= EOS_PENALTY
        z = z.astype(np.float32)
        z.setflags(write=False)
        return z

    def new_cache(self) -> Cache:
        return Cache()

    def forward(self, cache: Cache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        self._spend()
        return self._read(cache, tokens, parents, first_row)

    def forward_batch(self, caches: Sequence[Cache], tokens: Sequence[Sequence[int]],
                      parents: Sequence[Sequence[int] | None] | None = None,
                      first_rows: Sequence[int] | None = None) -> list[np.ndarray]:
        self._spend()
        parents = parents or [None] * len(caches)
        first_rows = first_rows or [0] * len(caches)
        return [self._read(c, t, p, f) for c, t, p, f in zip(caches, tokens, parents, first_rows)]

    def keep(self, cache: Cache, indices: Sequence[int]) -> None:
        cache.select(indices)

    def _read(self, cache: Cache, tokens: Sequence[int], parents: Sequence[int] | None, first_row: int) -> np.ndarray:
        base = len(cache)
        cache.append(tokens, parents)
        rows = [self.logits_for([cache.tokens[j] for j in cache.ancestors(i, ORDER)])
                for i in range(base + first_row, len(cache))]
        return np.stack(rows) if rows else np.zeros((0, self.vocab_size), np.float32)

    def _spend(self) -> None:
        self.forwards += 1
        if self.cost_s > 0:
            time.sleep(self.cost_s)


def _normal(seed: int, stream: int, tail: list[int], vocab: int) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream, len(tail), *tail])))
    return rng.standard_normal(vocab)


class SimTokenizer(Tokenizer):
    """Words <-> ids: id 0 is EOS, every other id is a pseudo-word made of two syllables."""

    def __init__(self, vocab: int) -> None:
        self.words = ["</s>"] + [_word(i) for i in range(1, vocab)]
        self.ids = {w: i for i, w in enumerate(self.words)}

    def encode(self, text: str, *, chat: bool = False) -> list[int]:
        n = len(self.words) - 1
        return [self.ids.get(w, 1 + zlib.crc32(w.encode()) % n) for w in text.split()] or [1]

    def decode(self, tokens: Sequence[int]) -> str:
        return " ".join(self.words[t] for t in tokens if t != EOS)


def _word(i: int) -> str:
    s = len(_SYLLABLES)
    return _SYLLABLES[i % s] + _SYLLABLES[(i // s) % s] + (str(i // (s * s)) if i >= s * s else "")


class SimBackend(Backend):
    MODEL_SEED = 1234  # the sim "weights"; fixed so every run talks about the same models

    def tokenizer(self) -> SimTokenizer:
        return SimTokenizer(self.config.sim.vocab)

    def target(self) -> SimModel:
        c = self.config
        return SimModel(c.sim.vocab, self.MODEL_SEED, 1.0, c.sim.verify_ms, draft=False)

    def draft(self) -> SimModel:
        c = self.config
        return SimModel(c.sim.vocab, self.MODEL_SEED, c.sim.agreement, c.sim.draft_ms, draft=True)

    def default_prompt(self) -> str:
        return "kaka lomi nene"
