"""One DSBD iteration: verify a draft forest layer by layer (Algorithm 1), then the bonus layer.

The forest. The draft beam-samples gamma layers from the W_in input beams: layer l holds n_l draft
beams (nodes), each drawn i.i.d. from the draft's q^(l) over (nodes of layer l-1) x V (layer 0 = the
input beams), so each node has a parent (a row of layer l-1) and a token. The target has run over
every node (forest attention, §3.3), so it knows log p(. | node) for each of them.

The iteration. Layer 1 is verified against p_beam over (input beams x V). If W_L of its nodes are
accepted they are the beams of step 1 and layer 2 is verified against p_beam over (ACCEPTED nodes of
layer 1) x V: its joint is computed from the accepted nodes' target log-probabilities, and a node of
layer 2 is a candidate only if its parent was accepted (children of rejected or discarded nodes are
skipped). A short layer ends the iteration with the beams ``verify_layer`` completed from p' and
p_beam; after gamma full layers a bonus layer of W_L beams is drawn from p_beam over (accepted nodes
of layer gamma) x V. The output is the beams of every step, the last being the next input.

Why each step's beams are Multinomial(W_L, p_beam) given the step before (Theorem 3.1, every layer).
Let A be the accepted nodes of layer l (the input of layer l+1). Given the forest up to layer l and
the verifier's uniforms so far (which determine A), the n_{l+1} nodes of layer l+1 are still i.i.d.
q^(l+1) over (nodes of layer l) x V: the draft drew them from layer l alone. The candidates are the
subsequence falling in A x V, and a subsequence of i.i.d. draws selected by membership of a fixed
set is, given its length m, i.i.d. from the law restricted to that set:

    q_A(a, v) = q^(l+1)(a, v) / sum_{a' in A, v'} q^(l+1)(a', v'),    a in A.

That q_A, and p_beam over A x V, are what ``verify_layer`` is given, so its lemma applies. A width
chosen from (p_beam, q_A, m) keeps the guarantee, conditional on the width: given m the candidates
are still i.i.d. q_A, and the width is fixed before any of their cells is looked at. (Dividing by
q^(l+1) restricted to A x V but not renormalised, as the reference code does, is not q_A: biased.)

So the beams, step after step and across iterations, form a Markov chain with beam sampling's
kernel: with iterations chained until at least j steps, the beams after step j have the law of j
steps of target-only beam sampling. The output of one iteration conditioned on how many steps it
emitted does not (as in speculative decoding, emitting more steps is likelier where q agrees with p).

Rows are nodes, not sequences: two nodes with the same sequence are two beams (beam sampling keeps
duplicates), each with its own row of q and of p_beam.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.core.beam_width import DynamicWidth
from ..runtime.core.beams import BeamStep, beam_distribution, joint_logprobs, sample_step
from ..runtime.core.sampling import SamplingParams
from .beam_acceptance import verify_layer, verify_layer_greedy

__all__ = ["DraftLayer", "Forest", "ForestVerdict", "verify_forest"]


@dataclass(frozen=True, slots=True)
class DraftLayer:
    """Layer l of the draft forest: n_l nodes drawn i.i.d. from ``q`` over (layer l-1 nodes) x V."""
    parents: np.ndarray       # [n_l] int: each node's parent, a row of layer l-1 (layer 1: an input beam)
    tokens: np.ndarray        # [n_l] int: each node's token
    q: np.ndarray | None      # [n_{l-1}, V]: the draft's q_beam the nodes were drawn from (None: greedy draft)
    target: np.ndarray        # [n_l, V]: the target's next-token log-probabilities after each node


@dataclass(frozen=True, slots=True)
class Forest:
    """A draft forest and the target's view of it: everything one DSBD verification needs."""
    logprobs: np.ndarray               # [W_in]: the input beams' joint log-probabilities (target, raw)
    target: np.ndarray                 # [W_in, V]: target next-token log-probabilities after each input beam
    layers: tuple[DraftLayer, ...]     # gamma draft layers

    def __post_init__(self) -> None:
        rows, vocab = len(self.logprobs), self.target.shape[-1]
        if self.target.shape != (rows, vocab):
            raise ValueError(f"target is {self.target.shape}, expected ({rows}, V): one row per input beam")
        for depth, layer in enumerate(self.layers, start=1):
            n = len(layer.tokens)
            if len(layer.parents) != n or layer.target.shape != (n, vocab):
                raise ValueError(f"layer {depth}: {len(layer.parents)} parents, {n} tokens, target "
                                 f"{layer.target.shape}; expected one of each per node and rows of {vocab}")
            if layer.q is not None and layer.q.shape != (rows, vocab):
                raise ValueError(f"layer {depth}: q is {layer.q.shape}, expected ({rows}, {vocab}): "
                                 f"one row per node of the layer above")
            if n and not (0 <= layer.parents.min() and layer.parents.max() < rows
                          and 0 <= layer.tokens.min() and layer.tokens.max() < vocab):
                raise ValueError(f"layer {depth}: a parent outside 0..{rows - 1} or a token outside 0..{vocab - 1}")
            rows = n


@dataclass(frozen=True, slots=True)
class ForestVerdict:
    """The beams after each step of the iteration: ``steps[0].parents`` index the input beams and
    ``steps[j].parents`` index ``steps[j-1]``. Steps 1..len(accepted) are accepted draft layers."""
    steps: tuple[BeamStep, ...]
    accepted: tuple[np.ndarray, ...]  # per full draft layer: the accepted nodes, in the order of their step

    @property
    def layers_used(self) -> int:
        return len(self.accepted)

    @property
    def output(self) -> BeamStep:
        """The next iteration's input beams."""
        return self.steps[-1]

    def paths(self) -> tuple[np.ndarray, np.ndarray]:
        """For each output beam: the input beam it grew from [W], and the tokens it appended [W, steps]."""
        beams = np.arange(self.output.width)
        tokens = np.empty((len(beams), len(self.steps)), dtype=np.int64)
        for j in reversed(range(len(self.steps))):
            tokens[:, j] = self.steps[j].tokens[beams]
            beams = self.steps[j].parents[beams]
        return beams, tokens


def verify_forest(forest: Forest, params: SamplingParams, width: int | DynamicWidth,
                  rng: np.random.Generator) -> ForestVerdict:
    """Algorithm 1: the beams of every step this iteration produces (at least one step, at most
    gamma + 1). ``width``: W_L of every layer, or the dynamic rule of §3.2 (sampled decoding only)."""
    dynamic = isinstance(width, DynamicWidth)
    if params.greedy and dynamic:
        raise ValueError("deterministic beam search has a fixed width; a dynamic width needs temperature > 0")
    if not dynamic and width < 1:
        raise ValueError(f"the beam width must be >= 1, got {width}")
    logprobs, target = forest.logprobs, forest.target
    keep = np.arange(len(logprobs))  # the nodes of the layer above that the current beams are
    above = len(logprobs)            # how many nodes that layer has
    steps, accepted = [], []
    for layer in forest.layers:
        joint = joint_logprobs(logprobs, target)
        row = np.full(above, -1)  # node of the layer above -> its row of p_beam, or -1 if not accepted
        row[keep] = np.arange(len(keep))
        live = np.flatnonzero(row[layer.parents] >= 0)  # candidates: children of accepted nodes, draft order
        rows, tokens = row[layer.parents[live]], layer.tokens[live]
        if params.greedy:
            out = verify_layer_greedy(joint, rows, tokens, int(width))
        else:
            if layer.q is None:
                raise ValueError("a sampled draft layer must carry the q it was drawn from")
            p, q = beam_distribution(joint, params), layer.q[keep]
            w = width.layer(p, q, len(live)) if dynamic else int(width)
            out = verify_layer(p, q, rows, tokens, w, rng)
        steps.append(BeamStep(out.parents, out.tokens, joint[out.parents, out.tokens]))
        if not out.full:
            return ForestVerdict(tuple(steps), tuple(accepted))
        keep = live[out.nodes]
        accepted.append(keep)
        logprobs, target, above = steps[-1].logprobs, layer.target[keep], len(layer.tokens)
    bonus = width.bonus if dynamic else int(width)
    steps.append(sample_step(joint_logprobs(logprobs, target), params, bonus, rng))
    return ForestVerdict(tuple(steps), tuple(accepted))

