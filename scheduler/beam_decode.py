"""Decoding loops: target-only beam sampling (or beam search) and DSBD, from one prompt for a fixed number
of steps, in process.

Both draw what the served forms draw (the verifier, and in DSBD one draft process per input beam), from
streams keyed by (seed, sequence, iteration): iteration r's target draws - its shuffle and acceptance in
DSBD - come from ``stream(seed, sequence, "beam", r)``. Iteration 0 is a target-only step from the prompt:
no beam exists before it. Iteration r >= 1 of DSBD draws its trees' node counts (``allocate``) from
``stream(seed, sequence, "allocate", r)`` and drafts one tree per input beam, tree s (the beam's index in
the beam list ``verify_beams`` returned) from ``beam_stream(seed, sequence, s, r)`` and its draft cache,
the one ``claim`` hands on.

Where to stop. A DSBD iteration emits 1 to gamma + 1 steps, and the beams form a Markov chain with beam
sampling's kernel step by step (scheduler/beam_forest.py). So iterations are chained until at least
``steps`` steps and the beams reported are those AFTER STEP ``steps``, taken from the last iteration's
per-step beams: they have the law of ``steps`` steps of target-only beam sampling. (The beams at the end of
the last iteration would not: how far an iteration overshoots depends on how well the draft agreed.)

A beam is its new tokens after the prompt and their joint log-probability given the prompt, under the raw
target. End of sequence is an ordinary token here: every beam grows by one token per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel
from ..runtime.core.beam_width import DynamicWidth
from ..runtime.core.beams import beam_stream
from ..runtime.core.sampling import SamplingParams, stream
from ..workers.beam_drafter import draft_tree
from .beam_allocation import allocate, combine
from .beam_verify import BeamAdvance, beams_after, claim, target_beam_step, verify_beams

__all__ = ["BeamResult", "DecodeStats", "beam_decode", "dsbd_decode"]

Advance = tuple[BeamAdvance, int | None]  # an iteration's result and its draft forwards (None: nothing drafted)


@dataclass(frozen=True, slots=True)
class DecodeStats:
    steps: int                        # steps emitted (the last iteration may go past the steps asked for)
    target_forwards: int              # one per iteration
    draft_forwards: int
    target_tokens_read: int           # unread context and draft nodes, over all rows of all forwards
    accept_counts: tuple[int, ...]    # drafting iterations by the number of draft layers accepted: 0, 1, ..., gamma

    @property
    def tokens_per_target_forward(self) -> float:
        """New tokens per beam per target forward: 1 for target-only decoding, up to gamma + 1 for DSBD."""
        return self.steps / self.target_forwards


@dataclass(frozen=True, slots=True)
class BeamResult:
    tokens: list[list[int]]  # the beams after the last step asked for: their new tokens
    logprobs: np.ndarray     # [W]: their joint log-probabilities given the prompt (raw target)
    stats: DecodeStats


def beam_decode(target: LanguageModel, prompt: Sequence[int], params: SamplingParams, width: int, steps: int, *,
                seed: int = 0, sequence: int = 0) -> BeamResult:
    """Target-only beam sampling (beam search at temperature 0) of ``width`` beams for ``steps`` steps.
    ``seed`` and ``sequence`` name the streams."""
    def advance(caches: list[Cache], contexts: list[list[int]], logprobs: np.ndarray, iteration: int) -> Advance:
        rng = stream(seed, sequence, "beam", iteration)
        return target_beam_step(target, caches, contexts, logprobs, params, width, rng), None

    return _decode(target, prompt, steps, 0, advance)


def dsbd_decode(target: LanguageModel, draft: LanguageModel, prompt: Sequence[int], params: SamplingParams,
                width: int | DynamicWidth, *, beams: int, gamma: int, steps: int, seed: int,
                sequence: int) -> BeamResult:
    """DSBD: after a target-only first step, each iteration drafts ``gamma`` layers of ``beams`` (W_S) draft
    beams, one tree per input beam, and the target verifies them in one forward, keeping ``width`` beams per
    step (W_L, or the dynamic rule of §3.2). ``seed`` and ``sequence`` name the streams."""
    drafts: list[Cache] = [draft.new_cache()]

    def advance(caches: list[Cache], contexts: list[list[int]], logprobs: np.ndarray, iteration: int) -> Advance:
        nonlocal drafts
        rng = stream(seed, sequence, "beam", iteration)
        if iteration == 0:
            out, drafted = target_beam_step(target, caches, contexts, logprobs, params, width, rng), None
        else:
            counts = allocate(logprobs, params, beams, gamma, stream(seed, sequence, "allocate", iteration))
            trees = [draft_tree(draft, cache, ctx, lp, params, n, beam_stream(seed, sequence, slot, iteration))
                     for slot, (cache, ctx, lp, n) in enumerate(zip(drafts, contexts, logprobs, counts))]
            forest = combine(trees, logprobs, params, rng)
            out = verify_beams(target, caches, contexts, logprobs, forest, params, width, rng)
            drafted = forest.forwards
        # the draft caches hold (a prefix of) the input contexts: hand them on as the target's are
        drafts = [drafts[o] if o >= 0 else draft.new_cache() for o in claim(out.roots, len(drafts))]
        return out, drafted

    return _decode(target, prompt, steps, gamma, advance)


def _decode(target: LanguageModel, prompt: Sequence[int], steps: int, gamma: int,
            advance: Callable[[list[Cache], list[list[int]], np.ndarray, int], Advance]) -> BeamResult:
    if steps < 1:
        raise ValueError(f"decode at least one step, got {steps}")
    caches, contexts, logprobs = [target.new_cache()], [list(prompt)], np.zeros(1)
    done = forwards = draft_forwards = read = 0
    accepted = [0] * (gamma + 1)
    iteration = 0
    while True:
        out, drafted = advance(caches, contexts, logprobs, iteration)
        forwards, read = forwards + 1, read + out.read
        if drafted is not None:
            draft_forwards += drafted
            accepted[out.layers_accepted] += 1
        if done + len(out.steps) >= steps:
            j = steps - done  # the step asked for, within this iteration
            stats = DecodeStats(done + len(out.steps), forwards, draft_forwards, read, tuple(accepted))
            return BeamResult([b[len(prompt):] for b in beams_after(contexts, out.steps, j)],
                              out.steps[j - 1].logprobs, stats)
        done += len(out.steps)
        caches, contexts, logprobs, iteration = out.caches, out.contexts, out.logprobs, iteration + 1
