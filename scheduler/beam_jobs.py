"""The verifier's beam sequences (``--mode beam`` and ``dsbd``): each holds W beams, not one context.

A beam sequence keeps its input beams (token contexts, the target's joint log-probabilities, a target
cache each) and, in dsbd, one draft worker per beam it holds. A round of dsbd: every slot that holds a
beam sends its tree (``TreeDraft``); once all have, the sequence enters the run queue as one ready
draft, so the policy schedules it like any other work; when picked, ``combine`` makes the trees one
forest (scheduler/beam_allocation.py states why that keeps Theorem 3.1), one batched target forward
reads it and ``verify_beams`` steps the beams on; each slot's worker is answered with its next task
(its new beam and how many nodes each layer of its tree gets, drawn by ``allocate``) or told to leave.
Round 0 has no beam to draft from: it is one target-only step from the prompt, after every starting
worker has said it is there (an empty tree). ``--mode beam`` is that step, round after round, with no
workers.

The workers follow the width, as an OS's process tree follows its work: when the dynamic width narrows,
the workers of the slots past it leave the sequence (``exit``: parked by the engine, kept loaded); when
it widens, the verifier asks the engine for a worker for each new slot (``beam_want``), and the one it
hands over (``fork``: a parked one, or a new process) joins (``beam_join``) and is given the slot's beam.
Which process drafts a slot never changes a draw: each tree's stream is keyed by its slot, not by it.

A new verifier goes on where a dead one stopped. After every round the sequence's ``state`` goes to the
engine with the round's commit (runtime/core/beam_state.py); re-announced with it, the sequence is
``restore``d at that round: the same beams, each read whole into a fresh target cache by the next forward,
and the same node counts, since a round's draws come from streams keyed by the round.

What is committed. Beams rewrite their past, so a token is final only once every beam holds it: after
each round the verifier commits the beams' common prefix. When the sequence has ``--max-new-tokens``
steps it takes the beams after exactly that step (beam_decode.py says why), commits the rest of the
most likely one and reports all of them. The random draws - a round's allocation on the verifier's
(seed, sequence, "allocate", round) stream, its shuffle and acceptance on (seed, sequence, "beam", round),
each tree on its slot's (seed, sequence, slot, round) stream - are those ``dsbd_decode`` makes, so a run's
beams are those of the in-process loop the law tests check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel
from ..runtime.core.beam_messages import BeamTask, TreeDraft
from ..runtime.core.beam_state import BeamState
from ..runtime.core.beam_trees import BeamTree
from ..runtime.core.beam_width import DynamicWidth
from ..runtime.core.config import Mode, RunConfig
from ..runtime.core.sampling import stream
from ..runtime.core.wire import ProtocolError
from .beam_allocation import allocate, combine
from .beam_verify import BeamAdvance, beams_after, target_beam_step, verify_beams
from .jobs import SequenceState, commit


@dataclass(slots=True)
class BeamSequence:
    st: SequenceState
    contexts: list[list[int]]
    logprobs: np.ndarray
    caches: list[Cache]
    round: int = 0
    steps: int = 0                                   # steps taken so far
    expected: set[int] = field(default_factory=set)  # slots whose tree this round waits for
    wanted: dict[int, int] = field(default_factory=dict)  # slot holding a beam, no worker yet -> the round it
                                                          # was asked for in (which names the request)
    epochs: list[int] = field(default_factory=list)  # per slot: the epoch (restarts) of the worker it files
    counts: np.ndarray | None = None                 # [W_in, gamma]: nodes per tree and layer this round
    trees: dict[int, tuple[TreeDraft, bytes, BeamTree | None]] = field(default_factory=dict)  # slot -> tree
    beams: list[list[int]] | None = None             # the final beams' new tokens, once done
    final_logprobs: np.ndarray | None = None

    @classmethod
    def start(cls, st: SequenceState, beams: int) -> BeamSequence:
        """Slots past the workers the job started with are vacant (-1) until a worker joins them."""
        st.beam_workers += [-1] * (beams - len(st.beam_workers))
        return cls(st, [list(st.prompt)], np.zeros(1), [st.cache], expected={
            slot for slot, worker in enumerate(st.beam_workers) if worker >= 0}, epochs=[0] * len(st.beam_workers))

    @classmethod
    def restore(cls, st: SequenceState, beams: int, state: BeamState, target: LanguageModel,
                config: RunConfig) -> BeamSequence:
        """The sequence as a dead verifier last reported it, for a new verifier to go on from: its beams,
        each in a fresh target cache (the next forward reads it whole), its slots, and the round's node counts
        drawn again from the round's stream. A slot's worker resumes it under a new epoch (beam_rounds.py)."""
        if len(state.slots) != beams:
            raise ProtocolError(f"beam state of sequence {st.seq} has {len(state.slots)} slots, its job {beams}")
        new = state.beams(st.generated)
        contexts = [st.prompt + b for b in new]
        seq = cls(st, contexts, state.logprobs, [st.cache, *(target.new_cache() for _ in contexts[1:])], state.round,
                  state.steps, wanted={s: int(w) for s, w in enumerate(state.wanted) if w >= 0}, epochs=[0] * beams)
        st.beam_workers, st.rounds = state.slots.tolist(), state.round
        if state.done:
            seq.beams, seq.final_logprobs = new, state.logprobs
        elif config.mode == Mode.DSBD:
            seq.counts, seq.expected = allocation(seq, config), set(range(len(contexts)))
        return seq

    def state(self) -> BeamState:
        """Where the sequence stands after its last round (runtime/core/beam_state.py): each beam past the
        committed tokens every beam holds."""
        st, final = self.st, self.beams is not None
        beams = self.beams if final else [c[len(st.prompt):] for c in self.contexts]
        base = len(_common_prefix([st.generated, *beams]))
        tails = np.array([b[base:] for b in beams], np.int32).reshape(len(beams), -1)  # beams of a step: equal lengths
        wanted = [self.wanted.get(slot, -1) for slot in range(len(st.beam_workers))]
        return BeamState(self.round, self.steps, base, tails,
                         np.asarray(self.final_logprobs if final else self.logprobs, np.float64),
                         np.asarray(st.beam_workers, np.int32), np.asarray(wanted, np.int32), final)

    @property
    def complete(self) -> bool:
        """Every expected tree of this round is in."""
        return self.expected <= self.trees.keys()

    def tree(self, slot: int) -> BeamTree:
        """The slot's tree (it may have no nodes: a sampled tree still carries the q its layers drew from)."""
        return self.trees[slot][2]


def width_rule(config: RunConfig) -> int | DynamicWidth:
    """W_L: --beams, or the dynamic rule (Eq. 6-7) capped at --beams, so no more workers are ever needed."""
    if not config.beam.threshold:
        return config.beam.width
    return CappedWidth(config.beam.threshold, config.beam.min_width, bonus=config.beam.width)


class CappedWidth(DynamicWidth):
    def layer(self, p, q, m: int) -> int:
        return min(self.bonus, super().layer(p, q, m))


def parse_tree(seq: BeamSequence, d: TreeDraft, config: RunConfig, vocab: int) -> BeamTree | None:
    """The slot's tree, checked whole before it is filed (a worker's arrays are not trusted: whatever passes
    here cannot fail the round's forward): exactly the node counts its task asked for, tokens in the
    vocabulary, parents in the layer above, and - sampled - a q of the vocabulary's width with mass in every
    layer that has rows, positive on every node's cell. Round 0's trees are empty: no beam exists yet."""
    if seq.counts is None or d.slot >= len(seq.contexts):
        if not d.empty or d.q is not None:
            raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot}, which holds no beam this round")
        return None
    asked = np.asarray(seq.counts[d.slot])
    if not np.array_equal(np.asarray(d.layer_sizes), asked):
        raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot} has layers {d.layer_sizes.tolist()}, "
                            f"its task asked for {asked.tolist()}")
    if len(d.tokens) and int(d.tokens.max()) >= vocab:
        raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot} holds a token outside the vocabulary")
    if config.sampling.greedy != (d.q is None) or (d.q is not None and d.q.shape[1] != vocab):
        shape = "absent (greedy)" if config.sampling.greedy else f"[rows, {vocab}]"
        raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot}: its q must be {shape}")
    try:
        tree = BeamTree.from_arrays(d.tokens, d.parents, d.layer_sizes, d.q)
    except ValueError as exc:
        raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot}: {exc}") from None
    if any(layer.q is not None and len(layer.q) and not layer.q.sum() > 0 for layer in tree.layers):
        raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot}: a layer's q has no mass")
    return tree


def advance(seq: BeamSequence, target: LanguageModel, config: RunConfig) -> BeamAdvance:
    """One round's forward: a target-only step (round 0, --mode beam) or the forest of the slots' trees."""
    width, rng = width_rule(config), stream(config.seed, seq.st.local, "beam", seq.round)
    if config.mode == Mode.BEAM or seq.round == 0:
        return target_beam_step(target, seq.caches, seq.contexts, seq.logprobs, config.sampling, config.beam.width, rng)
    trees = [seq.tree(s) for s in range(len(seq.contexts))]
    forest = combine(trees, seq.logprobs, config.sampling, rng)
    return verify_beams(target, seq.caches, seq.contexts, seq.logprobs, forest, config.sampling, width, rng)


def settle_round(seq: BeamSequence, out: BeamAdvance, config: RunConfig, eos: int | None) -> list[int]:
    """Take the round's beams; commit what is now final (returns it) and, unless done, draw next round's counts."""
    st, prompt = seq.st, len(seq.st.prompt)
    if seq.steps + len(out.steps) >= config.max_new_tokens:
        j = config.max_new_tokens - seq.steps  # the step asked for, within this round
        final = beams_after(seq.contexts, out.steps, j)
        seq.final_logprobs = out.steps[j - 1].logprobs
        seq.beams = [b[prompt:] for b in final]
        best = final[int(np.argmax(seq.final_logprobs))][prompt:]
        kept = commit(st, best[len(st.generated):], eos, config.max_new_tokens)
        st.done, seq.round = True, seq.round + 1
        return kept
    seq.steps += len(out.steps)
    seq.contexts, seq.logprobs, seq.caches = out.contexts, out.logprobs, out.caches
    if config.beam.inputs == "best":  # §3.4: one input beam, the most likely (= lowest perplexity: equal lengths)
        best = int(np.argmax(seq.logprobs))
        seq.contexts, seq.logprobs, seq.caches = [seq.contexts[best]], seq.logprobs[best:best + 1], [seq.caches[best]]
    shared = _common_prefix(seq.contexts)[prompt:]
    kept = commit(st, shared[len(st.generated):], eos, config.max_new_tokens)
    seq.round += 1
    if st.done:  # every beam holds the end of the sequence
        seq.beams, seq.final_logprobs = [b[prompt:] for b in seq.contexts], seq.logprobs
    elif config.mode == Mode.DSBD:
        seq.counts = allocation(seq, config)
    return kept


def allocation(seq: BeamSequence, config: RunConfig) -> np.ndarray:
    """[W_in, gamma]: how many nodes each tree of the sequence's round gets, from the round's own stream."""
    return allocate(seq.logprobs, config.sampling, config.beam.draft_width or config.beam.width, config.beam.gamma,
                    stream(config.seed, seq.st.local, "allocate", seq.round))


def tasks(seq: BeamSequence, verify_start: float, verify_end: float) -> tuple[list[tuple[int, BeamTask]], list[int]]:
    """After a round: (slot, its task) for every slot that has a worker - its beam next round, or leave
    (the sequence is done, or the width narrowed past the slot: the slot is vacant from now on) - and the
    slots that hold a beam but have no worker (the width widened: the engine is asked for one each)."""
    out, held = [], 0 if seq.st.done or seq.counts is None else len(seq.contexts)
    for slot, worker in enumerate(seq.st.beam_workers):
        if worker >= 0:
            out.append((slot, task(seq, slot, verify_start, verify_end)))
            if slot >= held:
                seq.st.beam_workers[slot] = -1
    seq.expected = set(range(held))
    want = [slot for slot in range(held) if seq.st.beam_workers[slot] < 0 and slot not in seq.wanted]
    seq.wanted.update((slot, seq.round) for slot in want)
    return out, want


def task(seq: BeamSequence, slot: int, verify_start: float = 0.0, verify_end: float = 0.0) -> BeamTask:
    """The slot's task for the round to come: its beam; in round 0, before any beam exists, an empty tree (no
    context); or leave (``done``) when it holds none."""
    holds = not seq.st.done and seq.counts is not None and slot < len(seq.contexts)
    first = not seq.st.done and seq.counts is None and slot in seq.expected
    out = BeamTask(seq.st.seq, slot, seq.round, not (holds or first), verify_start=verify_start,
                   verify_end=verify_end, epoch=seq.epochs[slot])
    if holds:
        out.context = np.asarray(seq.contexts[slot], np.int32)
        out.logprob = float(seq.logprobs[slot])
        out.counts = np.asarray(seq.counts[slot], np.int32)
    return out


def _common_prefix(contexts: list[list[int]]) -> list[int]:
    first = contexts[0]
    n = min(len(c) for c in contexts)
    for i in range(n):
        if any(c[i] != first[i] for c in contexts[1:]):
            return first[:i]
    return first[:n]
