"""The verifier's side of dsbd against bad input: a tree is filed only from its slot's worker, for the
round it expects, with the node counts its task asked for; anything else is a ProtocolError (counted by
the verifier, never fatal), and nothing is filed."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import target_model

from specsched.runtime.core.beam_messages import TreeDraft
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.transport import worker_identity
from specsched.runtime.core.wire import ProtocolError
from specsched.scheduler.beam_jobs import tasks
from specsched.scheduler.beam_rounds import BeamRounds
from specsched.scheduler.jobs import JobState

VOCAB = 16
EMPTY = np.zeros(0, np.int32)


def desk(temperature: float = 0.0):
    config = RunConfig.of(backend="sim", mode="dsbd", sim_vocab=VOCAB, beams=2, gamma=2, temperature=temperature,
                          prompts=["x"])
    target = target_model(VOCAB)
    job = JobState.from_message({"job": 0, "config": config.to_dict(), "sequences": [[7, 0, 10, [1, 2]]],
                                 "beam_workers": [[10, 11]]}, target)
    rounds = BeamRounds(target)
    rounds.add(job)
    return rounds, job


def empty(slot: int, worker: int, rnd: int = 0, seq: int = 7) -> TreeDraft:
    return TreeDraft(seq, worker, slot, rnd, EMPTY, EMPTY, EMPTY)


def test_a_round_is_complete_once_every_slot_has_sent():
    rounds, job = desk()
    assert not rounds.admit(empty(0, 10), worker_identity(10), job)
    assert rounds.admit(empty(1, 11), worker_identity(11), job)


@pytest.mark.parametrize("draft, sender, message", [
    (empty(0, 11), 11, "not from its worker"),           # slot 0 belongs to worker 10
    (empty(0, 10), 11, "not from its worker"),           # claims worker 10, sent by 11
    (empty(2, 10), 10, "not from its worker"),           # no slot 2
    (empty(0, 10, rnd=1), 10, "expected 0"),             # a round ahead
    (empty(0, 10, seq=8), 10, "not a running dsbd"),     # no such sequence
    (TreeDraft(7, 10, 0, 0, np.array([3], np.int32), np.array([-1], np.int32), np.array([1], np.int32)), 10,
     "holds no beam"),                                   # round 0 has no beam to draft from
])
def test_a_forged_or_stray_tree_is_refused_and_not_filed(draft, sender, message):
    rounds, job = desk()
    with pytest.raises(ProtocolError, match=message):
        rounds.admit(draft, worker_identity(sender), job)
    assert not rounds.seqs[7].trees


def test_the_same_slot_cannot_send_twice_in_a_round():
    rounds, job = desk()
    rounds.admit(empty(0, 10), worker_identity(10), job)
    with pytest.raises(ProtocolError, match="expected 0"):
        rounds.admit(empty(0, 10), worker_identity(10), job)


def test_a_tree_with_other_counts_than_its_task_is_refused():
    rounds, job = desk()
    for slot, worker in ((0, 10), (1, 11)):
        rounds.admit(empty(slot, worker), worker_identity(worker), job)
    kept, answers, _, _ = rounds.run(7, job)  # round 0: a target-only step; each slot gets its task
    task = answers[0][2]
    assert task.round == 1 and task.context is not None and list(task.counts) == [2, 2]  # greedy: W_S per layer
    wrong = TreeDraft(7, 10, 0, 1, np.array([3], np.int32), np.array([-1], np.int32), np.array([1], np.int32))
    with pytest.raises(ProtocolError, match="asked for"):
        rounds.admit(wrong, worker_identity(10), job)


def after_round_zero(temperature: float = 0.0):
    rounds, job = desk(temperature)
    for slot, worker in ((0, 10), (1, 11)):
        rounds.admit(empty(slot, worker), worker_identity(worker), job)
    _, answers, _, _ = rounds.run(7, job)
    return rounds, job, answers[0][2]


def tree(tokens, parents, sizes, q=None, slot=0, worker=10) -> TreeDraft:
    return TreeDraft(7, worker, slot, 1, np.array(tokens, np.int32), np.array(parents, np.int32),
                     np.array(sizes, np.int32), q)


@pytest.mark.parametrize("bad, message", [
    (tree([1, 2, 3, 4], [-1, -1, -1, 0], [2, 2]), "outside the layer above"),  # a layer-2 node under the beam
    (tree([1, 2, 3, 99], [-1, -1, 0, 1], [2, 2]), "outside the vocabulary"),
    (tree([1, 2, 3, 4], [-1, -1, 0, 1], [2, 2, 0]), "asked for"),               # a layer the task did not ask for
    (tree([1, 2, 3, 4], [-1, -1, 0, 1], [2, 2], q=np.ones((3, VOCAB), np.float32)), "q must be absent"),
])
def test_a_malformed_tree_is_refused_when_filed_never_in_the_forward(bad, message):
    rounds, job, task = after_round_zero()
    assert list(task.counts) == [2, 2]
    with pytest.raises(ProtocolError, match=message):
        rounds.admit(bad, worker_identity(10), job)
    assert not rounds.seqs[7].trees


def test_a_sampled_layer_whose_q_has_no_mass_is_refused():
    rounds, job, task = after_round_zero(temperature=1.0)
    sizes = task.counts.tolist()
    rows = 1 + sizes[0]
    tokens = np.arange(sum(sizes)) % VOCAB
    parents = [-1] * sizes[0] + [0] * sizes[1]
    q = np.zeros((rows, VOCAB), np.float32)  # no mass anywhere: nothing could have been drawn from it
    with pytest.raises(ProtocolError):
        rounds.admit(tree(tokens, parents, sizes, q=q), worker_identity(10), job)


def test_a_narrower_width_sends_a_slots_worker_away_and_a_wider_one_asks_the_engine_for_one():
    rounds, job, _ = after_round_zero()
    seq = rounds.seqs[7]
    wide = (seq.contexts, seq.logprobs, seq.counts)
    seq.contexts, seq.logprobs, seq.counts = seq.contexts[:1], seq.logprobs[:1], seq.counts[:1]
    answers, want = tasks(seq, 0.0, 0.0)
    assert [(slot, t.done) for slot, t in answers] == [(0, False), (1, True)] and want == []
    assert seq.st.beam_workers == [10, -1] and seq.expected == {0}
    with pytest.raises(ProtocolError, match="not from its worker"):  # the worker that left cannot send
        rounds.admit(tree([1, 2], [-1, -1], [2], slot=1, worker=11), worker_identity(11), job)
    seq.contexts, seq.logprobs, seq.counts = wide
    answers, want = tasks(seq, 0.0, 0.0)
    assert [slot for slot, _ in answers] == [0] and want == [1] and seq.expected == {0, 1}
    assert not seq.complete and seq.wanted == {1: seq.round}  # the request is named by its round
    for slot, sender, asked in ((0, 12, 1), (1, 10, 1), (1, 12, 0)):  # a slot nobody waits a worker for; a
        with pytest.raises(ProtocolError, match="not a slot waiting|not from its worker"):  # forged identity; another
            rounds.join(7, slot, 12, worker_identity(sender), asked, 0)
    given = rounds.join(7, 1, 12, worker_identity(12), 1, 0)  # the worker the engine sent: the slot's beam at once
    assert given.slot == 1 and not given.done and given.context.tolist() == seq.contexts[1]
    assert seq.st.beam_workers == [10, 12] and seq.wanted == {}
    with pytest.raises(ProtocolError, match="not a slot waiting"):  # taken: a second worker is refused
        rounds.join(7, 1, 13, worker_identity(13), 1, 0)
