"""The llama.cpp backend: the target runs in llama.cpp from its GGUF, the drafts stay in torch.

One llama.cpp context holds every sequence the verifier serves, in one unified KV cache: each cache
(``LlamaCache``) owns a base sequence id, and a forward of several caches' trees is one ``llama_decode``
call (``llama_seqs.py`` says how trees become sequence ids and how ``keep`` rolls them back). Logits of
every new token come back as float32 rows, so ``verify_tree`` and everything above the backend seam are
unchanged. Installed with the ``llamacpp`` extra (llama-cpp-python, compiled from source).
"""

from __future__ import annotations

import collections
import ctypes
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.config import ConfigError
from .backend import Cache, LanguageModel
from .llama_seqs import SeqIds, TreePlan, plan_keep, plan_tree

MAX_SEQ = 256   # llama.cpp's LLAMA_MAX_SEQ: live sequences plus the leaves of the trees in one forward
KV_CELLS = int(os.environ.get("SPECSCHED_LLAMA_KV_CELLS", "16384"))  # all sequences' cached tokens
UBATCH = 512    # tokens per compute pass; a larger decode is split by llama.cpp
INSTALL = 'pip install -e ".[llamacpp]"  (compiles llama.cpp: about 4 minutes on 2 cores)'


class LlamaCppMissing(ConfigError):
    """The optional llama-cpp-python package is not installed: the user's set-up, one line and exit 2."""


ERRORS: collections.deque[str] = collections.deque(maxlen=8)  # llama.cpp's last error lines, for messages


def llama_cpp_module():
    """llama_cpp, its log routed into ``ERRORS`` (load chatter dropped) and its backend initialised."""
    try:
        import llama_cpp  # lazy: optional dependency (the llamacpp extra)
    except ImportError as exc:
        raise LlamaCppMissing(f"--backend llamacpp needs llama-cpp-python: {INSTALL}") from exc
    if not hasattr(llama_cpp_module, "log"):
        llama_cpp_module.log = llama_cpp.llama_log_callback(_on_log)  # kept: ctypes must not free it
        llama_cpp.llama_log_set(llama_cpp_module.log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
    return llama_cpp


def _on_log(level: int, text: bytes, _user) -> None:
    if level == 3:  # GGML_LOG_LEVEL_ERROR
        ERRORS.append(text.decode("utf-8", "replace").strip())


def last_error() -> str:
    return ERRORS[-1] if ERRORS else "no message from llama.cpp"


# llama.cpp's LLAMA_FTYPE values of general.file_type that matter here (others print as their number)
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 15: "Q4_K_M",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


@dataclass(frozen=True, slots=True)
class GgufInfo:
    tokens: list[str]   # the vocabulary's token strings, in id order
    file_type: str      # "F32" (exact up to fp32 rounding), "Q4_1", ...

    @property
    def exact(self) -> bool:
        return self.file_type == "F32"


def read_gguf(path: Path) -> GgufInfo:
    """A GGUF's vocabulary and weight type (llama.cpp loads the vocabulary alone: no weights, ~0.1 s)."""
    lc = llama_cpp_module()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        # for a damaged file llama.cpp's log often says nothing (ggml's parser logs elsewhere)
        why = ERRORS[-1] if ERRORS else "is it damaged, truncated, or newer than this llama.cpp?"
        raise RuntimeError(f"llama.cpp cannot read {path}: {why}")
    try:
        vocab = lc.llama_model_get_vocab(model)
        tokens = [lc.llama_vocab_get_text(vocab, i).decode("utf-8", "replace")
                  for i in range(lc.llama_vocab_n_tokens(vocab))]
        return GgufInfo(tokens, _file_type(lc, model))
    finally:
        lc.llama_model_free(model)


def _file_type(lc, model) -> str:
    buf = ctypes.create_string_buffer(32)
    if lc.llama_model_meta_val_str(model, b"general.file_type", buf, len(buf)) < 0:
        return "unknown"
    code = int(buf.value or b"-1")
    return FILE_TYPES.get(code, f"type {code}")


class LlamaCache(Cache):
    def __init__(self, base: int) -> None:
        super().__init__()
        self.base = base                    # the llama.cpp sequence id of the committed chain
        self.base_len = 0                   # entries below this are the base chain's cells
        self.plan: TreePlan | None = None   # the last forward's tree, until keep() collapses it


class LlamaModel(LanguageModel):
    def __init__(self, gguf: Path, *, threads: int = 1) -> None:
        self.lc = llama_cpp_module()
        mparams = self.lc.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self._model = self.lc.llama_model_load_from_file(str(gguf).encode(), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp cannot load {gguf}: {last_error()}")
        # An fp32 GGUF gets an fp32 KV cache, so that a batched forward and one-token forwards differ only
        # by fp32 rounding (tests/fp32.py); a quantised one keeps llama.cpp's default f16 cache.
        self.file_type = _file_type(self.lc, self._model)
        self.exact = self.file_type == "F32"
        cparams = self.lc.llama_context_default_params()
        if self.exact:
            cparams.type_k = cparams.type_v = self.lc.GGML_TYPE_F32
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = KV_CELLS, KV_CELLS, UBATCH
        cparams.n_seq_max, cparams.kv_unified, cparams.no_perf = MAX_SEQ, True, True
        cparams.n_threads = cparams.n_threads_batch = max(1, threads)
        self._ctx = self.lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp cannot create a context for {gguf}: {last_error()}")
        self._mem = self.lc.llama_get_memory(self._ctx)
        self._embeddings = False  # llama_set_embeddings: on for the forwards that want features
        self.gives_features = True
        vocab = self.lc.llama_model_get_vocab(self._model)
        self.vocab_size = int(self.lc.llama_vocab_n_tokens(vocab))
        eos = int(self.lc.llama_vocab_eos(vocab))
        self.eos_token_id = eos if eos >= 0 else None
        self.ids = SeqIds(MAX_SEQ)
        self.threads = max(1, threads)

    def set_threads(self, n: int) -> None:
        if n > 0 and n != self.threads:
            self.lc.llama_set_n_threads(self._ctx, n, n)
            self.threads = n

    def new_cache(self) -> LlamaCache:
        cache = LlamaCache(self.ids.take())
        finalizer = weakref.finalize(cache, self._release, cache.base)
        finalizer.atexit = False  # at exit the context goes with the process
        return cache

    def _release(self, base: int) -> None:
        self.lc.llama_memory_seq_rm(self._mem, base, -1, -1)
        self.ids.give(base)

    def forward(self, cache: LlamaCache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        return self.forward_batch([cache], [tokens], [parents], [first_row])[0]

    def forward_batch(self, caches: Sequence[LlamaCache], tokens: Sequence[Sequence[int]],
                      parents: Sequence[Sequence[int] | None] | None = None,
                      first_rows: Sequence[int] | None = None) -> list[np.ndarray]:
        """Every cache's new tokens in one ``llama_decode``; a row of logits per new token from its first_row
        on (llama.cpp computes logits only for the tokens flagged for them)."""
        parents = list(parents) if parents is not None else [None] * len(caches)
        first_rows = list(first_rows) if first_rows is not None else [0] * len(caches)
        if not all(c.linear for c in caches):  # checked before anything changes
            raise RuntimeError("forward on a tree cache: collapse it with keep() first")
        plans, firsts = [], []
        try:
            for cache, toks, par in zip(caches, tokens, parents):
                cache.base_len = len(cache)
                absolute = cache.append(toks, par)
                plans.append(plan_tree(absolute, cache.base_len, cache.base, self.ids))
                firsts.append(cache.base_len)
        except Exception:
            self._undo(caches[:len(plans) + 1], plans)
            raise
        total = sum(len(t) for t in tokens)
        if total == 0:
            return [np.zeros((0, self.vocab_size), np.float32) for _ in caches]
        for cache, plan in zip(caches, plans):
            cache.plan = plan
            for seq, length in plan.forks:
                if length > 0:
                    self.lc.llama_memory_seq_cp(self._mem, cache.base, seq, 0, length)
        width = max(len(s) for plan in plans for s in plan.seq_sets)
        batch = self.lc.llama_batch_init(total, 0, width)
        if self.want_features != self._embeddings:
            # on: llama.cpp also returns each output token's last hidden state (the LM head's input) beside its
            # logits; every token is then an output, so the rows before first_row get logits too (not read)
            self.lc.llama_set_embeddings(self._ctx, self.want_features)
            self._embeddings = self.want_features
        try:
            self._fill(batch, caches, plans, firsts, [0] * len(caches) if self.want_features else first_rows)
            code = self.lc.llama_decode(self._ctx, batch)
            if code != 0:
                self._undo(caches, plans)
                why = ("its KV cache is full: all sequences' cached tokens exceed "
                       f"{KV_CELLS} cells (set SPECSCHED_LLAMA_KV_CELLS)") if code == 1 else last_error()
                raise RuntimeError(f"llama_decode failed ({code}): {why}")
            rows, out = [], 0
            for toks, first in zip(tokens, first_rows):
                block = np.empty((max(len(toks) - first, 0), self.vocab_size), np.float32)
                for r in range(len(block)):
                    ptr = self.lc.llama_get_logits_ith(self._ctx, out + first + r)
                    block[r] = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,))
                rows.append(block)
                out += len(toks)
            self.features = self._features(tokens) if self.want_features else None
            return rows
        finally:
            self.lc.llama_batch_free(batch)

    def _features(self, tokens: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each sequence's feature rows of the last decode, one per new token."""
        n_embd, out, rows = self.lc.llama_model_n_embd(self._model), 0, []
        for toks in tokens:
            block = np.empty((len(toks), n_embd), np.float32)
            for r in range(len(toks)):
                block[r] = np.ctypeslib.as_array(self.lc.llama_get_embeddings_ith(self._ctx, out + r), shape=(n_embd,))
            rows.append(block)
            out += len(toks)
        return rows

    def _fill(self, batch, caches, plans, firsts, first_rows) -> None:
        i = 0
        for cache, plan, first, first_row in zip(caches, plans, firsts, first_rows):
            for j, seqs in enumerate(plan.seq_sets):
                batch.token[i] = cache.tokens[first + j]
                batch.pos[i] = cache.positions[first + j]
                batch.n_seq_id[i] = len(seqs)
                for k, s in enumerate(seqs):
                    batch.seq_id[i][k] = s
                batch.logits[i] = int(j >= first_row)
                i += 1
        batch.n_tokens = i

    def _undo(self, caches, plans) -> None:
        """Forget a forward that did not happen: its cells, its temporary ids, its cache entries."""
        for cache, plan in zip(caches, plans):
            for seq in plan.leaves.values():
                if seq != cache.base:
                    self.lc.llama_memory_seq_rm(self._mem, seq, -1, -1)
                    self.ids.give(seq)
            self.lc.llama_memory_seq_rm(self._mem, cache.base, cache.base_len, -1)
            cache.plan = None
        for cache in caches:
            if len(cache) > cache.base_len:
                cache.select(range(cache.base_len))

    def keep(self, cache: LlamaCache, indices: Sequence[int]) -> None:
        indices = list(indices)
        plan = plan_keep(indices, cache.parents, cache.base_len, cache.base, cache.plan)
        for op in plan.ops:
            if op[0] == "rm":
                self.lc.llama_memory_seq_rm(self._mem, *op[1:])
            else:
                self.lc.llama_memory_seq_cp(self._mem, *op[1:])
        for seq in plan.released:
            self.ids.give(seq)
        cache.plan = None
        cache.select(indices)
        cache.base_len = len(cache)
