"""The target side of DSBD: read a draft forest in one batched forward, verify it, hand the caches on.

Forest attention (§3.3). Each input beam keeps its own target cache. One batched forward reads, per input
beam, its unread context and then its tree of draft nodes (workers/beam_drafter.py: layer order, parents
relative), laid out as ``lay_out`` lays out a token tree, rows from its ``first_row``: row 0 holds the logits
after the input beam, row 1 + j those after tree node j. Their log-softmax are the ``Forest``'s target rows, mapped
back to layer order, and ``verify_forest`` (Algorithm 1) turns them into the beams of every step.

Caches afterwards. Output beam k grew from input beam r_k through one accepted node per full layer; its last
token was drawn by the target and is not in any cache. Output beam k takes the cache of r_k while that one is
free, which keeps r_k's context and k's accepted nodes (so only the last token is read next time); the others
take any free cache rolled back to its own context (``sync_to`` re-reads from where it differs), or a new one.

Target-only beam sampling (the baseline) is the same step with no draft layers: W beams drawn from p_beam over
(input beams x V), the bonus step of an empty forest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel
from ..runtime.core.beam_trees import BeamDraft
from ..runtime.core.beam_width import DynamicWidth
from ..runtime.core.beams import BeamStep, log_softmax
from ..runtime.core.sampling import SamplingParams
from .beam_forest import DraftLayer, Forest, ForestVerdict, verify_forest
from .layout import Layout, lay_out

__all__ = ["BeamAdvance", "ForestRead", "beams_after", "claim", "read_forest", "target_beam_step", "verify_beams"]


@dataclass(frozen=True, slots=True)
class ForestRead:
    """The target's logits after every input beam and every draft node, from one batched forward."""
    inputs: np.ndarray               # [W_in, V]: after each input beam
    layers: tuple[np.ndarray, ...]   # per layer [n_l, V]: after each node
    layouts: tuple[Layout, ...]      # per input beam: what its cache read

    @property
    def read(self) -> int:
        """Tokens the target read in the forward: unread context plus draft nodes."""
        return sum(len(layout.tokens) for layout in self.layouts)


@dataclass(frozen=True, slots=True)
class BeamAdvance:
    """One iteration's result: the beams after each step, the output beams and a target cache for each."""
    steps: tuple[BeamStep, ...]  # steps[0].parents index the input beams, steps[j].parents steps[j - 1]
    contexts: list[list[int]]    # the output beams: input context + the tokens appended
    roots: np.ndarray            # [W]: the input beam each output beam grew from
    caches: list[Cache]          # [W]: a target cache per output beam, holding a prefix of its context
    layers_accepted: int         # full draft layers (steps taken from the draft)
    read: int                    # tokens the target read

    @property
    def logprobs(self) -> np.ndarray:
        """The output beams' joint log-probabilities (raw target)."""
        return self.steps[-1].logprobs


def read_forest(target: LanguageModel, caches: Sequence[Cache], contexts: Sequence[Sequence[int]],
                draft: BeamDraft) -> ForestRead:
    """One ``forward_batch``: each input beam's cache synced to its context, then its tree of nodes."""
    trees = draft.trees()
    layouts = tuple(lay_out(target, c, list(ctx), t.tokens, t.parents) for c, ctx, t in zip(caches, contexts, trees))
    rows = target.forward_batch(list(caches), [lo.tokens for lo in layouts], [lo.parents for lo in layouts],
                                [lo.first_row for lo in layouts])
    inputs = np.stack([r[0] for r in rows])  # the rows from each layout's first_row on
    layers = [np.empty((len(layer.tokens), target.vocab_size), dtype=inputs.dtype) for layer in draft.layers]
    for tree, r in zip(trees, rows):
        for j, (depth, node) in enumerate(zip(tree.layers, tree.nodes)):
            layers[depth][node] = r[1 + j]
    return ForestRead(inputs, tuple(layers), layouts)


def verify_beams(target: LanguageModel, caches: Sequence[Cache], contexts: Sequence[Sequence[int]],
                 logprobs: np.ndarray, draft: BeamDraft, params: SamplingParams, width: int | DynamicWidth,
                 rng: np.random.Generator) -> BeamAdvance:
    """Verify ``draft`` against the target (one batched forward) and move on: ``caches`` (one per input beam,
    plain sequences) are reused for the output beams and must not be used again."""
    if len(caches) != len(contexts) or len(logprobs) != len(contexts) or draft.width_in != len(contexts):
        raise ValueError(f"{len(contexts)} input beams need as many caches, log-probabilities and draft roots; "
                         f"got {len(caches)}, {len(logprobs)}, {draft.width_in}")
    seen = read_forest(target, caches, contexts, draft)
    forest = Forest(np.asarray(logprobs, dtype=np.float64), log_softmax(seen.inputs),
                    tuple(DraftLayer(layer.parents, layer.tokens, layer.q, log_softmax(rows))
                          for layer, rows in zip(draft.layers, seen.layers)))
    verdict = verify_forest(forest, params, width, rng)
    roots, chains = _accepted_chains(verdict)
    owners = claim(roots, len(caches))
    positions = draft.positions()
    for r, (cache, lo) in enumerate(zip(caches, seen.layouts)):
        mine = [k for k, o in enumerate(owners) if o == r and roots[k] == r]
        path = [lo.base + int(positions[depth][node]) for depth, node in enumerate(chains[mine[0]])] if mine else []
        kept = [*range(lo.base), *path]
        if kept != list(range(len(cache))):  # anything else is a tree or a rejected tail
            target.keep(cache, kept)
    return BeamAdvance(verdict.steps, beams_after(contexts, verdict.steps, len(verdict.steps)), roots,
                       [caches[o] if o >= 0 else target.new_cache() for o in owners], verdict.layers_used, seen.read)


def target_beam_step(target: LanguageModel, caches: Sequence[Cache], contexts: Sequence[Sequence[int]],
                     logprobs: np.ndarray, params: SamplingParams, width: int | DynamicWidth,
                     rng: np.random.Generator) -> BeamAdvance:
    """One step of target-only beam sampling (beam search at temperature 0): one batched forward. A dynamic
    width steps ``width.bonus`` beams, its nominal W_L."""
    return verify_beams(target, caches, contexts, logprobs, BeamDraft(len(contexts), ()), params, width, rng)


def beams_after(contexts: Sequence[Sequence[int]], steps: Sequence[BeamStep], j: int) -> list[list[int]]:
    """The beams (full token lists) after the first ``j`` of ``steps``, grown from ``contexts``."""
    beams = [list(c) for c in contexts]
    for step in steps[:j]:
        beams = [beams[b] + [int(v)] for b, v in zip(step.parents, step.tokens)]
    return beams


def claim(roots: np.ndarray, count: int) -> list[int]:
    """Which of ``count`` caches (one per input beam) output beam k takes: its root's while free, then any
    free one in order; -1 for a new cache."""
    owners = [-1] * len(roots)
    free = list(range(count))
    for k, r in enumerate(roots):
        if int(r) in free:
            owners[k] = int(r)
            free.remove(int(r))
    for k in range(len(roots)):
        if owners[k] < 0 and free:
            owners[k] = free.pop(0)
    return owners


def _accepted_chains(verdict: ForestVerdict) -> tuple[np.ndarray, list[list[int]]]:
    """Per output beam: its input beam, and its accepted node in each full layer (layer order)."""
    width = verdict.output.width
    roots, chains = np.empty(width, dtype=np.int64), []
    for k in range(width):
        b, chain = k, []
        for j in reversed(range(len(verdict.steps))):
            if j < verdict.layers_used:
                chain.append(int(verdict.accepted[j][b]))
            b = int(verdict.steps[j].parents[b])
        roots[k] = b
        chains.append(chain[::-1])
    return roots, chains
