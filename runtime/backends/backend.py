"""The backend seam: a language model with a KV cache, a tokenizer, and a pair of them.

Everything above this seam - draft workers, the verifier, the acceptance rule - sees logits as
float32 numpy rows and tokens as ints, so the synthetic backend needs no torch at all (hundreds of
sim workers fit on a small machine) and the transformers backend plugs in unchanged.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import BackendKind, ConfigError, RunConfig
from ..core.draft_q import DraftQ
from ..core.sampling import SamplingParams
from .cache import Cache


@dataclass(slots=True)
class Traffic:
    """Bytes a model's forwards copied host -> device (inputs, masks, indices) and device -> host (logits).
    Zero where the forwards run on the CPU: nothing crosses."""
    h2d: int = 0
    d2h: int = 0

    def since(self, before: Traffic) -> Traffic:
        return Traffic(self.h2d - before.h2d, self.d2h - before.d2h)

    def copy(self) -> Traffic:
        return Traffic(self.h2d, self.d2h)


@dataclass(slots=True)
class ChainPlan:
    """A draft chain to draw where the model runs (LanguageModel.draft_chain): k tokens by `params`, the i-th
    at uniforms[i] of the sequence's draft stream (None when greedy); `guide`, given the tokens drafted so
    far, names a token to propose with q = δ instead of the model's choice (prompt lookup), or None."""
    k: int
    params: SamplingParams
    uniforms: np.ndarray | None = None
    guide: Callable[[list[int]], int | None] | None = None


@dataclass(slots=True)
class DraftedChain:
    tokens: np.ndarray          # int32 [k]
    q: DraftQ | None            # what each token was drawn from (a point mass for the guide's); None when greedy
    conf: np.ndarray            # float32 [k]: the draft's probability of each token at T = 1


class LanguageModel(ABC):
    vocab_size: int
    eos_token_id: int | None
    device: str = "cpu"          # where its forwards run: "cpu" or "cuda:N"
    # draft_chain is implemented and pays: the logits stay on the device (device_chain.py), or narrow, over a
    # feature draft's own vocabulary (feature_chain.py)
    draws_chains: bool = False

    # A target whose forwards keep their features (the last hidden state, the LM head's input) for the feature
    # draft: after a forward with `want_features` set, `features[i]` holds sequence i's rows [its new tokens, d].
    gives_features: bool = False   # its forwards can keep features (hf and llama.cpp targets)
    want_features: bool = False
    features: list[np.ndarray] | None = None

    @property
    def traffic(self) -> Traffic:
        """Host <-> device bytes of its forwards so far (placement.py); none on the CPU."""
        return Traffic()

    # -- a draft that reads the target's features (backends/feature.py); other drafts need none --------
    def features_held(self, cache: Cache) -> int:
        """How many of the target's feature rows of the verified prefix this draft holds; -1: it reads none."""
        return -1

    def take_features(self, cache: Cache, start: int, rows: np.ndarray) -> None:
        """A verdict's feature rows, from prefix position `start` on."""

    def can_draft(self, cache: Cache, context: Sequence[int]) -> bool:
        """Whether it can draft after `context` now (a feature draft waits for the context's features)."""
        return True

    @abstractmethod
    def new_cache(self) -> Cache: ...

    @abstractmethod
    def forward(self, cache: Cache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        """Read ``tokens`` into the cache; return logits [len(tokens) - first_row, V], row i predicting what
        follows token first_row + i. ``parents`` (absolute cache indices, -1 = none) makes them a tree: each
        token then attends to its ancestors only. None appends a plain sequence. ``first_row``: the rows of
        the tokens before it are not wanted, and backends need not compute them (a prompt's, but for its
        last: the head over the vocabulary is ~30 % of a SmolLM2-135M prefill)."""

    def draft_chain(self, cache: Cache, tokens: Sequence[int], plan: ChainPlan) -> DraftedChain:
        """Read ``tokens``, then draw a chain of plan.k tokens, each fed to the next forward but the last,
        without bringing logits to the host (device_chain.py) or writing them out V wide (feature_chain.py):
        what TreeDrafter does for a chain through ``forward``, for models with ``draws_chains``."""
        raise NotImplementedError(f"{type(self).__name__} drafts through forward()")

    def warm_up(self) -> None:
        """A throwaway prefill and one step on a cache of its own, run once after loading, so that a job's
        first forward costs what its later ones do. A fresh process pays first-call costs on its first
        forward - on hf the kernels' set-up: the distilled draft's first took ~100 ms against ~10 ms
        (2026-11-28, 2-vCPU AMD EPYC) - which inside a job would stretch the first verification and every
        worker's first wait, a delay no later round repeats. Nothing it reads stays: the cache is dropped,
        and traffic is counted by difference."""
        cache = self.new_cache()
        tokens = [min(t, self.vocab_size - 1) for t in (1, 2, 3, 4, 5)]
        self.forward(cache, tokens[:4])
        self.forward(cache, tokens[4:])

    def set_threads(self, n: int) -> None:
        """Threads of the next forwards (the verifier's share of the cores, forward by forward)."""

    @abstractmethod
    def keep(self, cache: Cache, indices: Sequence[int]) -> None:
        """Keep only the cache entries ``indices`` (a root-first path): rollback after a verdict."""

    def crop(self, cache: Cache, length: int) -> None:
        """Forget everything after the first ``length`` entries."""
        if length < len(cache):
            self.keep(cache, range(length))

    def forward_batch(self, caches: Sequence[Cache], tokens: Sequence[Sequence[int]],
                      parents: Sequence[Sequence[int] | None] | None = None,
                      first_rows: Sequence[int] | None = None) -> list[np.ndarray]:
        """Several sequences at once (``first_rows``: each one's ``first_row``). Default: one after another;
        backends may truly batch."""
        parents = parents or [None] * len(caches)
        first_rows = first_rows or [0] * len(caches)
        return [self.forward(c, t, p, first_row=f) for c, t, p, f in zip(caches, tokens, parents, first_rows)]

    def root_row(self, cache: Cache, committed: Sequence[int]) -> np.ndarray:
        """The logits after ``committed``: the cache synced to it, the rest read, only the last row computed."""
        unread = self.sync_to(cache, committed)
        return self.forward(cache, unread, first_row=len(unread) - 1)[-1]

    def sync_to(self, cache: Cache, committed: Sequence[int]) -> list[int]:
        """Crop the cache to its longest prefix shared with ``committed``; return what is left to read.

        After a verdict the cache holds prefix + draft, the truth is prefix + accepted + correction:
        keeping the common prefix is exactly the rollback, for chains and trees alike.
        """
        if not cache.linear:
            raise RuntimeError("sync_to needs a plain-sequence cache: collapse the tree with keep() first")
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

    def chat_text(self, messages: list[dict]) -> str:
        """A conversation ({"role", "content"} turns, the last the user's) as the text the target reads next:
        its chat template where it has one, with the assistant's turn opened; here, the turns' contents."""
        return "\n".join(m["content"] for m in messages)


class Backend(ABC):
    """A target/draft pair and its tokenizer, built from the run configuration."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config

    def check_paths(self) -> None:
        """The models named are there: cheap (no torch), checked before the engine starts its zygote."""

    def check(self) -> None:
        """Validate the pair before any model loads (e.g. vocabularies match): may import the model
        libraries, while the engine's zygote imports them too."""

    def vocabulary(self, role: str) -> dict:
        """What a draft must share with the target ("target" or "draft"): the vocabulary's size and, where
        a tokenizer is known, a digest of it (None otherwise). A worker joining from another host is
        refused when its draft's differs from the engine's target's (same_vocabulary)."""
        return {"size": self.config.sim.vocab, "tokens": None}

    def context_length(self) -> int | None:
        """The most positions the target reads (a prompt and what is generated after it), where known."""
        return None

    def draft_reads_features(self) -> bool:
        """Whether the draft its workers load reads the target's features (a feature draft): cheap (no torch)."""
        return False

    def check_mode(self, mode: str) -> None:
        """A job's --mode that the draft its workers load can serve (ConfigError otherwise)."""

    @abstractmethod
    def tokenizer(self) -> Tokenizer: ...

    @abstractmethod
    def target(self) -> LanguageModel: ...

    @abstractmethod
    def draft(self) -> LanguageModel: ...

    def default_prompt(self) -> str:
        return "Write three short steps to make a cup of tea."


def same_vocabulary(target: dict, draft: dict) -> str | None:
    """Why a draft cannot serve a target (None: it can): sizes must match, and tokenizers where both known."""
    if int(target["size"]) != int(draft["size"]):
        return f"the target's vocabulary has {target['size']} tokens, the draft's {draft['size']}"
    if target.get("tokens") and draft.get("tokens") and target["tokens"] != draft["tokens"]:
        return "the target's and the draft's tokenizers differ"
    return None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def preload_modules(config: RunConfig) -> list[str]:
    """What every child of an engine on this backend imports: the zygote imports it once for all."""
    # numpy.random: numpy imports it at first use, ~20 ms that would land in each child's first random stream
    serving = ["specsched.runtime.engine.child", "specsched.scheduler.serve", "specsched.workers.draft_worker",
               "numpy.random"]
    if config.backend in (BackendKind.HF, BackendKind.LLAMACPP):
        return [*serving, "specsched.runtime.backends.hf_pair", "specsched.runtime.backends.hf_model",
                "specsched.runtime.backends.hf_load",
                "specsched.runtime.backends.placement", "transformers.models.llama.modeling_llama",
                "specsched.runtime.models.draft_model", "transformers"]
    return [*serving, "specsched.runtime.backends.sim"]


# Each backend's class, by the module that holds it (those modules subclass Backend from this one).
BACKEND_CLASSES = {
    BackendKind.SIM: (".sim", "SimBackend"),
    BackendKind.HF: (".hf_pair", "HFBackend"),
    BackendKind.LLAMACPP: (".llamacpp_backend", "LlamaCppBackend"),
}


def get_backend(config: RunConfig) -> Backend:
    if config.backend not in BACKEND_CLASSES:
        raise ConfigError(f"unknown --backend {config.backend!r}")
    module, name = BACKEND_CLASSES[config.backend]
    # lazy: hf_pair and llamacpp_backend, ~0.2 s of start-up (measured 2026-11-27), which a sim
    # process does without (sim.py: 2 ms); they subclass Backend from this module
    return getattr(importlib.import_module(module, __package__), name)(config)
