"""The goodput policy: the batch of most expected committed tokens per second of the fitted forward cost,
always with the oldest draft, and the output of a real run unchanged."""

from __future__ import annotations

from helpers import outputs, run_ok, sim_config, words

from specsched.policies.base import PolicySettings, ReadyDraft
from specsched.policies.goodput import Goodput
from specsched.runtime.core.costs import CostCurve

MANY = 12  # ready drafts: a queue of several jobs' drafts
CURVE = CostCurve(a=0.050, b=0.003, c=0.013)  # the default pair's shape on a 2-core CPU


def draft(order: int, length: int = 4, expected: float = 3.0, **kw) -> ReadyDraft:
    return ReadyDraft(worker=order, seq=order, arrival=float(order), order=order, length=length,
                      verified_tokens=0, expected_tokens=expected, **kw)


def policy(max_batch: int = 0, cost: CostCurve | None = CURVE) -> Goodput:
    p = Goodput(PolicySettings(max_batch=max_batch))
    p.cost = cost
    return p


def workers(batch) -> list[int]:
    return [d.worker for d in batch]


def test_before_any_forward_is_timed_it_batches_every_ready_draft_oldest_first():
    ready = [draft(2), draft(0), draft(1)]
    assert workers(policy(cost=None).pick(ready)) == [0, 1, 2]
    assert workers(policy(max_batch=2, cost=None).pick(ready)) == [0, 1]


def test_drafts_that_raise_the_rate_join_the_batch():
    # one: 3 / (50 + 3*5) ms = 46/s; three: 9 / (50 + 3*15 + 2*13) ms = 74/s
    assert workers(policy().pick([draft(0), draft(1), draft(2)])) == [0, 1, 2]


def test_a_long_draft_with_a_poor_record_is_left_out_of_the_batch():
    # with it every row is padded to 21 tokens: 7.2 / (50 + 3*63 + 26) ms = 27/s, without 6 / 93 ms = 65/s
    ready = [draft(0), draft(1, length=20, expected=1.2), draft(2)]
    assert workers(policy().pick(ready)) == [0, 2]


def test_the_oldest_draft_always_goes_so_none_waits_forever():
    ready = [draft(0, length=20, expected=1.2), draft(1), draft(2)]
    assert workers(policy().pick(ready))[0] == 0


def test_a_dear_extra_row_keeps_drafts_apart():
    dear_rows = CostCurve(a=0.010, b=0.001, c=0.050)  # a row costs five fixed parts
    assert workers(policy(cost=dear_rows).pick([draft(0), draft(1)])) == [0]


def test_max_batch_bounds_the_batch():
    assert len(policy(max_batch=2).pick([draft(i) for i in range(5)])) == 2


def test_before_a_sequence_has_a_record_its_draft_counts_half_its_tokens_plus_one():
    fresh = draft(0, length=6, expected=0.0)
    p = policy()
    assert p.rate([fresh]) == (6 / 2 + 1) / CURVE.time(7)


def test_a_long_queue_still_gets_the_batch_of_good_drafts():
    ready = [draft(i) for i in range(MANY + 4)] + [draft(MANY + 4, length=30, expected=1.0)]
    chosen = workers(policy().pick(ready))
    assert chosen[0] == 0 and MANY + 4 not in chosen and len(chosen) == MANY + 4


def test_goodput_keeps_the_output_of_a_real_run():
    prompts = [words(64, (5, 7)), words(64, (3, 9)), words(64, (11, 13))]
    kw = dict(mode="seed", workers=3, prompts=prompts, max_new_tokens=16, sim_vocab=64, seed=3)
    reference = outputs(run_ok(sim_config(policy="fcfs", **kw)))
    # drafts (1 ms) come far faster than verifications (20 ms): they wait together, and goodput batches them
    record = run_ok(sim_config(policy="goodput", max_batch=0, sim_draft_ms=1, sim_verify_ms=20, **kw))
    assert outputs(record) == reference
    assert record.collected.counters["batched_drafts"] > record.collected.counters["verifications"]
