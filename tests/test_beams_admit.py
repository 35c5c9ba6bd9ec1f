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
from specsched.scheduler.beam_rounds import BeamRounds
from specsched.scheduler.jobs import JobState

VOCAB = 16
EMPTY = np.zeros(0, np.int32)


def desk(temperature: float = 0.0):
    config = RunConfig(backend="sim", mode="dsbd", sim_vocab=VOCAB, beams=2, gamma=2, temperature=temperature,
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
    kept, answers, _ = rounds.run(7, job)  # round 0: a target-only step; each slot gets its task
    task = answers[0][2]
    assert task.round == 1 and task.context is not None and list(task.counts) == [2, 2]  # greedy: W_S per layer
    wrong = TreeDraft(7, 10, 0, 1, np.array([3], np.int32), np.array([-1], np.int32), np.array([1], np.int32))
    with pytest.raises(ProtocolError, match="asked for"):
        rounds.admit(wrong, worker_identity(10), job)
