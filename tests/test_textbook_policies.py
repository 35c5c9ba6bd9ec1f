"""The textbook policies, each against the rule its docstring states and, where the textbook has one,
its worked example (OSTEP: Arpaci-Dusseau, Operating Systems: Three Easy Pieces, chs. 7-9)."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import outputs, sim_config, words

from specsched.policies.base import ReadyDraft
from specsched.policies.cfs import CFS
from specsched.policies.edf import EDF
from specsched.policies.loader import BUILTIN
from specsched.policies.lottery import Lottery
from specsched.policies.mlfq import MLFQ
from specsched.policies.sjf import SJF
from specsched.policies.srtf import SRTF
from specsched.policies.stride import Stride
from specsched.runtime.engine.engine import Engine


def draft(worker: int, order: int = 0, **kw) -> ReadyDraft:
    base = dict(seq=worker, arrival=float(order), order=order, length=4, verified_tokens=0)
    return ReadyDraft(worker=worker, **{**base, **kw})


def serve_all(policy, drafts: list[ReadyDraft], seconds: float = 0.01) -> list[int]:
    """Pick until every draft is served, each once; the order of the workers served."""
    order = []
    ready = list(drafts)
    while ready:
        chosen = policy.pick(ready)
        order.append(chosen.worker)
        policy.served(chosen, seconds, 1)
        ready.remove(chosen)
    return order


def test_sjf_serves_the_smallest_job_first_as_in_the_convoy_example():
    # OSTEP 7.4: A = 100, B = 10, C = 10 arrive together (A first): SJF runs B, C, then A
    a = draft(0, 0, tokens_remaining=100)
    b = draft(1, 1, tokens_remaining=10)
    c = draft(2, 2, tokens_remaining=10)
    assert serve_all(SJF(), [a, b, c]) == [1, 2, 0]
    # SJF weighs the whole job: a long job nearly done still counts as long
    done_soon = draft(0, 0, verified_tokens=95, tokens_remaining=5)
    assert SJF().pick([done_soon, draft(1, 1, tokens_remaining=10)]).worker == 1


def test_srtf_weighs_what_is_left():
    # OSTEP 7.5: A has 90 left when B and C (10 each) arrive: they overtake it
    a = draft(0, 0, verified_tokens=10, tokens_remaining=90)
    assert serve_all(SRTF(), [a, draft(1, 1, tokens_remaining=10), draft(2, 2, tokens_remaining=10)]) == [1, 2, 0]
    nearly_done = draft(0, 0, verified_tokens=95, tokens_remaining=5)
    assert SRTF().pick([nearly_done, draft(1, 1, tokens_remaining=10)]).worker == 0


def test_edf_serves_the_nearest_deadline_and_jobs_without_one_last():
    ready = [draft(0, 0, deadline=None), draft(1, 1, deadline=30.0), draft(2, 2, deadline=20.0)]
    assert serve_all(EDF(), ready) == [2, 1, 0]


def test_stride_follows_the_textbook_schedule():
    # OSTEP Figure 9.3: A, B, C with 100, 50, 250 tickets: A, B, C, C, C, A, C, C, ...
    policy = Stride()
    ready = {w: draft(w, w, tickets=t) for w, t in ((0, 100), (1, 50), (2, 250))}
    order = []
    for _ in range(8):
        chosen = policy.pick(list(ready.values()))
        order.append("ABC"[chosen.worker])
    assert order == list("ABCCCACC")


def test_stride_shares_are_proportional_within_one_pass():
    policy, tickets = Stride(), {0: 100, 1: 50, 2: 250}
    ready = [draft(w, w, tickets=t) for w, t in tickets.items()]
    served = Counter(policy.pick(ready).worker for _ in range(400))
    for w, t in tickets.items():  # exact up to one pass: at most one verification off
        assert abs(served[w] - 400 * t / 400) <= 1


def test_a_late_worker_joins_stride_at_the_lowest_pass():
    policy = Stride()
    for _ in range(10):
        policy.pick([draft(0, 0), draft(1, 1)])
    late = draft(2, 2)
    order = [policy.pick([draft(0, 0), draft(1, 1), late]).worker for _ in range(6)]
    assert Counter(order) == {0: 2, 1: 2, 2: 2}  # an equal share, not a monopoly


def test_lottery_shares_follow_the_tickets_and_the_draws_are_reproducible():
    ready = [draft(0, 0, tickets=300), draft(1, 1, tickets=100)]
    first = [Lottery().pick(ready).worker for _ in range(5)]
    policy = Lottery()
    wins = Counter(policy.pick(ready).worker for _ in range(4000))
    # binomial(4000, 0.75): sd 27.4; 5 sd from 3000 happens with probability < 1e-6
    assert abs(wins[0] - 3000) < 5 * 27.4
    assert first == [Lottery().pick(ready).worker for _ in range(5)]  # same generator, same draws


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_mlfq_rules_one_by_one():
    clock = Clock()
    policy = MLFQ(clock=clock)
    a, b, c = draft(0, 0), draft(1, 1), draft(2, 2)
    # rule 3: everyone starts at the top; rule 2: equal levels go round-robin
    assert [policy.pick([a, b]).worker for _ in range(3)] == [0, 1, 0]
    # rule 4: using up the allotment (50 ms at the top, however it is split) moves a worker down
    for _ in range(5):
        policy.served(a, 0.01, 1)
    assert policy.level[0, 0] == 1 and policy.level[0, 1] == 0
    # rule 1: a higher queue always goes first
    assert [policy.pick([a, b]).worker for _ in range(3)] == [1, 1, 1]
    # rule 3 again: a newcomer starts at the top, above the demoted worker
    assert policy.pick([a, c]).worker == 2
    # rule 4 keeps demoting down to the bottom level, never below
    for _ in range(100):
        policy.served(a, 0.01, 1)
    assert policy.level[0, 0] == MLFQ.levels - 1
    # rule 5: after S seconds everyone is back at the top
    clock.now += MLFQ.boost_s
    policy.pick([a, b])
    assert policy.level == {(0, 0): 0, (0, 1): 0}


def test_cfs_serves_the_least_virtual_runtime_and_weights_by_priority():
    policy = CFS()
    a, b = draft(0, 0), draft(1, 1, priority=-5)  # b is more urgent: weight 1024 * 1.25^5 = 3125
    order = []
    for _ in range(40):
        chosen = policy.pick([a, b])
        policy.served(chosen, 0.01, 1)
        order.append(chosen.worker)
    share = order.count(1) / len(order)
    assert share == pytest.approx(3125 / (3125 + 1024), abs=0.05)  # verifier time in proportion to weight


def test_every_textbook_policy_keeps_the_output_in_a_real_run():
    prompts = [words(64, (5, 7)), words(64, (3, 9)), words(64, (11, 13))]
    kw = dict(mode="seed", workers=3, prompts=prompts, max_new_tokens=12, sim_vocab=64, seed=3)
    with Engine(sim_config(**kw)) as engine:  # one engine, a job per policy
        reference = outputs(engine.generate(policy="fcfs"))
        for name in ("sjf", "srtf", "mlfq", "lottery", "stride", "edf", "cfs"):
            assert name in BUILTIN
            record = engine.generate(policy=name, tickets=[300, 100, 100])
            assert record.status == "ok", (name, record.error)
            assert outputs(record) == reference, name


def test_a_pool_worker_serving_a_new_job_does_not_bring_back_its_old_account():
    for policy in (Stride(), CFS()):
        for _ in range(30):  # job 0: worker 0 alone runs up a large pass / virtual runtime
            chosen = policy.pick([draft(0, 0, job=0)])
            policy.served(chosen, 0.01, 1)
        # job 1 reuses worker 0 beside a newcomer worker 1: they share equally from the start
        order = []
        for _ in range(6):
            chosen = policy.pick([draft(0, 0, job=1), draft(1, 1, job=1)])
            policy.served(chosen, 0.01, 1)
            order.append(chosen.worker)
        assert Counter(order) == {0: 3, 1: 3}, type(policy).__name__
    mlfq = MLFQ(clock=Clock())
    for _ in range(10):
        mlfq.served(mlfq.pick([draft(0, 0, job=0)]), 0.01, 1)   # demoted in job 0
    assert mlfq.level[0, 0] > 0
    mlfq.pick([draft(1, 1, job=1), draft(0, 0, job=1)])
    assert mlfq.level[1, 0] == mlfq.level[1, 1] == 0  # rule 3: in job 1 both start at the top

