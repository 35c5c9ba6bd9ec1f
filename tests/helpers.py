"""Shared helpers for the core test suite: fast sim runs and exact sim references.

Everything here works on the sim backend, whose next-token distributions are exact functions of the
context, so a test can compute the true answer (greedy tokens, or the probability of any output)
without running the runtime at all and compare the runtime's output against it.

The other helper modules: cli_runs.py (the command line in a subprocess), process_watch.py (processes
watched and killed), loopback_decode.py (a draft worker and the verifier in one process), rendering.py
(Rich renderables as text) and chi2.py (the chi-square statistics).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence

import numpy as np

from specsched.runtime.apps.run.app import RunRecord, run
from specsched.runtime.backends.sim import EOS, SimBackend, SimModel, SimTokenizer
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.sampling import SamplingParams, distribution

# Small simulated forward costs: fast runs that still interleave drafts and verifications.
FAST = {"sim_draft_ms": 1.0, "sim_verify_ms": 2.0}


def sim_config(**overrides) -> RunConfig:
    return RunConfig.of(**{"backend": "sim", **FAST, **overrides})


def run_ok(config: RunConfig) -> RunRecord:
    """One in-process run (the supervisor and its child processes); it must succeed."""
    record = run(config)
    assert record.status == "ok", f"run {record.status}: {record.error}"
    return record


def outputs(record: RunRecord) -> list[list[int]]:
    return [s.tokens for s in record.sequences]


# -- exact references from the sim models ---------------------------------------------------------

def wait_until_started(job, timeout: float = 60) -> None:
    """Until the job has committed its first tokens (its processes are serving it)."""
    deadline = time.monotonic() + timeout
    while not job.collected.tokens:
        assert time.monotonic() < deadline, "the job committed nothing"
        time.sleep(0.01)


def target_model(vocab: int) -> SimModel:
    return SimModel(vocab, SimBackend.MODEL_SEED, 1.0, 0.0, draft=False)


def draft_model(vocab: int, agreement: float) -> SimModel:
    return SimModel(vocab, SimBackend.MODEL_SEED, agreement, 0.0, draft=True)


def words(vocab: int, tokens: Iterable[int]) -> str:
    """A prompt text that the sim tokenizer encodes to exactly ``tokens``."""
    tok = SimTokenizer(vocab)
    text = " ".join(tok.words[t] for t in tokens)
    assert tok.encode(text) == list(tokens)
    return text


def greedy_reference(prompt: Sequence[int], vocab: int, max_new: int) -> list[int]:
    """Plain greedy decoding of the target, one argmax at a time: what every mode must produce."""
    model, context, out = target_model(vocab), list(prompt), []
    while len(out) < max_new:
        t = int(model.logits_for(context).argmax())
        out.append(t)
        context.append(t)
        if t == EOS:
            break
    return out


def outcome_probabilities(model: SimModel, prompt: Sequence[int], length: int,
                          params: SamplingParams) -> dict[tuple[int, ...], float]:
    """Exact probability of every possible output of ``length`` new tokens (ending early at EOS)."""
    probs: dict[tuple[int, ...], float] = {}

    def grow(context: list[int], out: tuple[int, ...], mass: float) -> None:
        if len(out) == length or (out and out[-1] == EOS):
            probs[out] = probs.get(out, 0.0) + mass
            return
        p = distribution(model.logits_for(context)[None], params)[0].astype(np.float64)
        p /= p.sum()
        for t in np.flatnonzero(p):
            grow(context + [int(t)], out + (int(t),), mass * p[t])

    grow(list(prompt), (), 1.0)
    return probs


def transition_table(model: SimModel, vocab: int, params: SamplingParams) -> dict[tuple[int, int], np.ndarray]:
    """p(next | last two tokens) for every two-token context (the sim models are order-2 Markov)."""
    table = {}
    for a, b in itertools.product(range(vocab), repeat=2):
        p = distribution(model.logits_for([a, b])[None], params)[0].astype(np.float64)
        table[(a, b)] = p / p.sum()
    return table
