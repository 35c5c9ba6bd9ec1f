"""`--backend llamacpp`: the target in llama.cpp from its GGUF, the drafts and tokenizer as on `hf`.

The target's vocabulary is read from the GGUF itself (its token strings in id order), so the one check
that a draft may serve a target (``same_vocabulary``) compares what llama.cpp will score against what
the torch draft proposes, not two copies of a tokenizer that might have drifted apart.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cached_property
from pathlib import Path

from ..core.config import ConfigError
from ..models.errors import ModelError
from ..models.gguf_target import is_gguf, resolve_gguf
from ..models.registry import PRESETS, resolve_draft, resolve_target
from .backend import same_vocabulary
from .hf_pair import HFBackend, HFTokenizer, default_reads_features
from .llamacpp import LlamaModel, read_gguf


class LlamaCppBackend(HFBackend):
    @cached_property
    def gguf(self) -> Path:
        try:
            return resolve_gguf(self.config.target)
        except ModelError as exc:
            raise ConfigError(str(exc)) from None

    def paths(self) -> tuple[str, str]:
        c = self.config
        if is_gguf(c.target):  # the draft: as given, else the default preset's (the vocabulary check decides)
            return str(self.gguf), str(resolve_draft(c.draft, None, features=default_reads_features(c)))
        return super().paths()

    def draft_embeddings(self) -> str | None:
        """A GGUF target has no transformers directory: a distilled draft named by its preset reads the
        preset's target, any other the default pair's (load_draft's default)."""
        if not is_gguf(self.config.target):
            return super().draft_embeddings()
        return str(resolve_target(self.config.draft)) if self.config.draft in PRESETS else None

    def check_paths(self) -> None:
        super().check_paths()
        if is_gguf(self.config.target):  # llama.cpp reads a GGUF's header and vocabulary in ~0.1 s, without torch:
            self.info  # noqa: B018 - a damaged file is one line before the zygote starts, not a verifier that dies

    def check(self) -> None:
        why = same_vocabulary(self.vocabulary("target"), self.vocabulary("draft"))
        if why:
            raise ConfigError(f"the draft {self.paths()[1]} cannot serve the GGUF target {self.gguf}: {why}; "
                              "speculative decoding needs the same vocabulary")

    @cached_property
    def info(self):
        """The GGUF's vocabulary and weight type (``llamacpp.GgufInfo``)."""
        try:
            return read_gguf(self.gguf)
        except RuntimeError as exc:  # llama.cpp refused the file: damaged, truncated, or a GGUF version it lacks
            raise ConfigError(f"--target: {exc}") from None

    def context_length(self) -> int | None:
        return None  # the GGUF's cache cells bound it instead (llamacpp.py)

    def vocabulary(self, role: str) -> dict:
        if role != "target":
            return super().vocabulary(role)
        tokens = self.info.tokens
        digest = hashlib.sha256(json.dumps(sorted({t: i for i, t in enumerate(tokens)}.items())).encode())
        return {"size": len(tokens), "tokens": digest.hexdigest()}

    def tokenizer(self) -> HFTokenizer:
        if is_gguf(self.config.target):  # transformers reads a GGUF's tokenizer (chat template included)
            return HFTokenizer(str(self.gguf.parent), gguf_file=self.gguf.name)
        return super().tokenizer()

    def target(self):
        # the verifier's Cores sets the threads before every forward; this is only the start
        return LlamaModel(self.gguf, threads=self.config.verifier_threads or os.cpu_count() or 1)
