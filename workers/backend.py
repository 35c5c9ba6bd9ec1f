"""The backend seam: a language model with a KV cache, a tokenizer, and a pair of them.

Everything above this seam - draft workers, the verifier, the acceptance rule - sees logits as
float32 numpy rows and tokens as ints, so the synthetic backend needs no torch at all (hundreds of
sim workers fit on a small machine) and the transformers backend plugs in unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from specsched.runtime.config import ConfigError, RunConfig


class Cache:
    """What a model has already read. Backends subclass it to hold their key/value tensors."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def __len__(self) -> int:
        return len(self.tokens)


class LanguageModel(ABC):
    vocab_size: int
    eos_token_id: int | None

    @abstractmethod
    def new_cache(self) -> Cache: ...

    @abstractmethod
    def forward(self, cache: Cache, tokens: Sequence[int]) -> np.ndarray:
        """Read ``tokens`` after the cache; return logits [len(tokens), V] (row i predicts i + 1)."""

    @abstractmethod
    def crop(self, cache: Cache, length: int) -> None:
        """Forget everything after the first ``length`` tokens (rollback after a verdict)."""

    def forward_batch(self, caches: Sequence[Cache], tokens: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Several sequences at once. Default: one after another; backends may truly batch."""
        return [self.forward(c, t) for c, t in zip(caches, tokens)]

    def sync_to(self, cache: Cache, committed: Sequence[int]) -> list[int]:
        """Crop the cache to its longest prefix shared with ``committed``; return what is left to read.

        After a verdict the cache holds prefix + draft, the truth is prefix + accepted + correction:
        keeping the common prefix is exactly the rollback, for chains and trees alike.
        """
        keep = common_prefix(cache.tokens, committed)
        if keep == len(committed):  # always leave one token to read, so forward yields logits
            keep -= 1
        if keep < len(cache):
            self.crop(cache, keep)
        return list(committed[keep:])


class Tokenizer(ABC):
    @abstractmethod
    def encode(self, text: str, *, chat: bool) -> list[int]: ...

    @abstractmethod
    def decode(self, tokens: Sequence[int]) -> str: ...


class Backend(ABC):
    """A target/draft pair and its tokenizer, built from the run configuration."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    def check(self) -> None:
        """Validate the pair before any process starts (e.g. vocabularies match)."""

    @abstractmethod
    def tokenizer(self) -> Tokenizer: ...

    @abstractmethod
    def target(self) -> LanguageModel: ...

    @abstractmethod
    def draft(self) -> LanguageModel: ...

    def default_prompt(self) -> str:
        return "Write three short steps to make a cup of tea."


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def get_backend(config: RunConfig) -> Backend:
    # Imported lazily: a sim worker must never pay for importing torch.
    if config.backend == "sim":
        from specsched.workers.sim import SimBackend
        return SimBackend(config)
    if config.backend == "hf":
        from specsched.workers.hf import HFBackend
        return HFBackend(config)
    raise ConfigError(f"unknown --backend {config.backend!r}")
