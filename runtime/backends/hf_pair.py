"""The transformers backend's pair and tokenizer: which directories (or cached hub ids) it loads, the checks
before any process starts (the two vocabularies agree), and the models it builds on each process's
placement (hf_model.py holds the model and its caches).

torch and transformers are not imported with this module: the checks of the cheap mistakes (a path that is not
there, a GPU that is not there) answer before the seconds those imports cost. transformers is imported by
`_transformers` for a config or a tokenizer, torch with the models themselves (hf_load.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import BackendKind, ConfigError, DrafterKind, Mode, RunConfig
from ..core.device import cpu_rows, device_chains, gpu_device_files, refuse_absent_gpu
from ..models.draft_files import (
    FEATURE_CONFIG,
    distilled_vocab,
    is_distilled_draft,
    is_feature_draft,
)
from ..models.gguf_target import is_gguf
from ..models.registry import PRESETS, default_draft_name, resolve_pair
from ..models.weights import damaged_weights
from .backend import Backend, Tokenizer

if TYPE_CHECKING:
    from .feature import FeatureModel
    from .hf_model import HFModel
    from .placement import Placement


class HFTokenizer(Tokenizer):
    def __init__(self, path: str, *, gguf_file: str | None = None) -> None:
        """A tokenizer directory, or with ``gguf_file`` the tokenizer inside that GGUF in ``path``."""
        auto = _transformers().AutoTokenizer
        self.tok = auto.from_pretrained(path, gguf_file=gguf_file) if gguf_file else auto.from_pretrained(path)

    def encode(self, text: str, *, chat: bool) -> list[int]:
        if chat and getattr(self.tok, "chat_template", None):
            out = self.tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
            return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)
        return list(self.tok.encode(text))

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tok.decode(list(tokens), skip_special_tokens=True)

    def chat_text(self, messages: list[dict]) -> str:
        """The template's text for a whole conversation; `encode(chat=True)` is the one-message case, tokenised."""
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return super().chat_text(messages)

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()


def default_reads_features(config: RunConfig) -> bool:
    """Whether a run that names no draft gets its preset's feature draft (else the distilled one): not under
    --mode dsbd (beam drafts carry no target features), not for a GGUF named by --target (another model with
    the same tokenizer gives features of another width; the distilled draft serves any such target), and not on
    a GPU, where the feature draft has not been measured yet. `--draft smollm2-feature` asks for it anywhere.
    No torch: a GPU is judged by its device files."""
    if config.mode == Mode.DSBD or is_gguf(config.target):
        return False
    return config.backend != BackendKind.HF or config.device == "cpu" or not gpu_device_files()


def pinned_draft(config: RunConfig) -> str | None:
    """The --draft name of the draft this host's rule gives a run naming none (None: it names one, or the preset
    has no named drafts): what the engine tells a worker joining from another host, whose own rule may differ."""
    if config.draft is not None or config.backend == BackendKind.SIM:
        return None
    return default_draft_name(config.target, default_reads_features(config))


class HFBackend(Backend):
    def paths(self) -> tuple[str, str]:
        c = self.config
        if c.target and c.draft and not {c.target, c.draft} & PRESETS.keys():
            return c.target, c.draft  # two model directories (or hub ids) as given
        return resolve_pair(c.target, c.draft, features=default_reads_features(c))

    def check_paths(self) -> None:
        """The cheap checks: no torch, no transformers."""
        refuse_absent_gpu(self.config.device)
        device_chains()  # each draft model reads it: a bad value is refused here, not by every worker in turn
        cpu_rows()  # and each target model this one
        for role, path in zip(("target", "draft"), self.paths()):
            self.exists(role, path)
            if role == "draft" and self.config.drafter == DrafterKind.BRANCHES:
                continue  # Self-Draft: the target drafts for itself, no draft weights are read
            if Path(path).is_dir() and (why := damaged_weights(Path(path))):
                raise ConfigError(f"--{role}: {why}; copy or pull it again (the default target: `specsched "
                                  "models pull --force`)")

    def check(self) -> None:
        """The GPU asked for is there (imports torch), the vocabularies agree (imports transformers)."""
        target, draft = self.paths()
        self.config.model_device  # noqa: B018 - --device cuda without a GPU: one line, before any model loads
        t, d = self.vocabulary("target"), self.vocabulary("draft")
        if t["size"] != d["size"]:
            raise ConfigError(f"draft and target vocabularies differ: target {target} has {t['size']} "
                              f"tokens, draft {draft} has {d['size']}; speculative decoding needs the "
                              "same tokenizer")
        if t["tokens"] is not None and d["tokens"] is not None and t["tokens"] != d["tokens"]:
            raise ConfigError(f"draft and target tokenizers differ ({target} vs {draft}): "
                              "speculative decoding needs the same vocabulary")
        if is_feature_draft(Path(draft)):
            self.check_feature_draft(target, draft)

    def draft_reads_features(self) -> bool:
        return is_feature_draft(Path(self.paths()[1]))

    def check_mode(self, mode: str) -> None:
        """Beams (dsbd) cannot use a feature draft: their drafts carry no target features."""
        if mode == Mode.DSBD and self.draft_reads_features():
            raise ConfigError(f"--mode dsbd cannot use the feature draft {self.paths()[1]}: beam drafts carry no "
                              "target features; use a distilled draft (--draft smollm2-distilled)")

    def check_feature_draft(self, target: str, draft: str) -> None:
        """A feature draft reads the target's features: their width must be its own, and beams (dsbd), whose
        drafts carry no features, cannot use it."""
        self.check_mode(self.config.mode)
        width = int(json.loads((Path(draft) / FEATURE_CONFIG).read_text())["hidden"])
        try:
            target_width = int(_model_config(target).hidden_size)
        except (OSError, ValueError, AttributeError, TypeError):
            return  # no transformers config (a GGUF): the worker's first verdict tells
        if width != target_width:
            raise ConfigError(f"the feature draft {draft} reads features {width} wide, but the target {target} "
                              f"gives {target_width}: it was trained for another target")

    @staticmethod
    def exists(role: str, path: str) -> None:
        if not Path(path).exists() and not _looks_like_hub_id(path):
            raise ConfigError(f"{role} model not found: {path}")

    def vocabulary(self, role: str) -> dict:
        path = self.paths()[0 if role == "target" else 1]
        self.exists(role, path)
        if is_distilled_draft(Path(path)) or is_feature_draft(Path(path)):
            size = distilled_vocab(Path(path))
        else:
            try:
                size = int(_model_config(path).vocab_size)
            except (OSError, ValueError) as exc:
                reason = str(exc).splitlines()[0]
                raise ConfigError(f"cannot read the {role} model at {path}: {reason}") from None
        return {"size": size, "tokens": tokenizer_digest(path)}

    def context_length(self) -> int | None:
        """The target's max_position_embeddings (RoPE reads on past it, into positions it never learnt)."""
        try:
            return int(_model_config(self.paths()[0]).max_position_embeddings)
        except (OSError, ValueError, AttributeError, TypeError):
            return None

    def tokenizer(self) -> HFTokenizer:
        return HFTokenizer(self.paths()[0])

    def target(self) -> HFModel:
        return _models().target(self)

    def draft(self) -> HFModel | FeatureModel:
        return _models().draft(self)

    def draft_embeddings(self) -> str | None:
        """Where a distilled draft reads its shared embeddings: its target's directory (None: the default's)."""
        return self.paths()[0]

    def placement(self) -> Placement:
        """This process's device and stream (--device, resolved here, after the fork)."""
        return _models().placement(self.config.model_device)


def tokenizer_digest(path: str) -> str | None:
    """sha256 of a tokenizer's vocabulary (token -> id, sorted); None when `path` has no tokenizer."""
    tokens = _tokenizer_vocab(path)
    return None if tokens is None else hashlib.sha256(json.dumps(sorted(tokens.items())).encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def _model_config(path: str):
    """A model directory's transformers config, read once: the vocabulary check and the positions both need it."""
    return _transformers().AutoConfig.from_pretrained(path)


def _tokenizer_vocab(path: str) -> dict[str, int] | None:
    try:
        return _transformers().AutoTokenizer.from_pretrained(path).get_vocab()
    except (OSError, ValueError, TypeError):
        return None


def _looks_like_hub_id(path: str) -> bool:
    return path.count("/") == 1 and not path.startswith((".", "/")) and os.path.sep * 2 not in path


def _transformers():
    """transformers, for a model's config or its tokenizer: the engine's checks read them without torch."""
    # lazy: transformers, ~1.8 s of start-up and ~6 s with AutoTokenizer and AutoConfig (measured 2026-11-27): a missing
    # model or GPU is refused without it
    import transformers

    return transformers


def _models():
    """hf_load.py: the models on their placement (imports torch)."""
    # lazy: torch + transformers' models, ~11 s of start-up (measured 2026-11-27): the engine loads no model
    from . import hf_load

    return hf_load
