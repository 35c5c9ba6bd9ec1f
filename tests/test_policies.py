"""The built-in scheduling policies (fcfs, priority, rr, batch): given arrivals, the exact order in
which the verifier is handed drafts.

Every test feeds drafts into the real RunQueue (the verifier's run queue) or hands ReadyDraft lists
to a policy, and asserts the whole pick order, tie-breaks included. The seam any policy plugs into
(what the run queue accepts back from it, and how one is loaded) is tested in test_policy_plugins.py.
"""

from __future__ import annotations

import pytest
from policy_drafts import drain, pick_all, queue_with, ready

from specsched.policies import Policy, PolicySettings
from specsched.policies.batch import Batch
from specsched.policies.fcfs import FCFS
from specsched.policies.priority import Priority
from specsched.policies.rr import RoundRobin
from specsched.runtime.apps.cli import build_parser
from specsched.runtime.apps.run.flag_config import config_from_args
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft
from specsched.scheduler.run_queue import start_policy

# -- FCFS -------------------------------------------------------------------------------------------

def test_fcfs_serves_by_arrival_time_then_by_counter():
    drafts = [ready(0, 3.0, 0), ready(1, 1.0, 1), ready(2, 2.0, 2), ready(3, 1.0, 3), ready(4, 0.5, 4)]
    assert drain(FCFS(), drafts) == [4, 1, 3, 2, 0]


def test_fcfs_ignores_priority_and_worker_id():
    drafts = [ready(5, 1.0, 0, priority=9), ready(0, 2.0, 1, priority=0), ready(2, 1.5, 2, priority=-3)]
    assert drain(FCFS(), drafts) == [5, 2, 0]


def test_fcfs_through_the_run_queue_with_equal_arrival_times():
    # Drafts drained in one batch can carry the same arrival stamp: the counter decides.
    q = queue_with(FCFS(), [(2, 5.0, 0), (0, 5.0, 0), (1, 4.0, 0), (3, 5.0, 0)])
    assert pick_all(q) == [1, 2, 0, 3]


# -- priority ---------------------------------------------------------------------------------------

def test_priority_lower_value_first_then_arrival_then_counter():
    drafts = [
        ready(0, 1.0, 0, priority=2),
        ready(1, 4.0, 1, priority=0),
        ready(2, 3.0, 2, priority=1),
        ready(3, 2.0, 3, priority=0),
        ready(4, 2.0, 4, priority=0),   # same priority and arrival as worker 3: counter breaks the tie
        ready(5, 0.5, 5, priority=1),
    ]
    assert drain(Priority(), drafts) == [3, 4, 1, 5, 2, 0]


def test_priority_accepts_negative_values_as_more_urgent():
    drafts = [ready(0, 1.0, 0, priority=0), ready(1, 2.0, 1, priority=-1)]
    assert drain(Priority(), drafts) == [1, 0]


def test_priority_starves_a_low_priority_worker_while_urgent_ones_keep_arriving():
    # Worker 0 (priority 5) is ready first; workers 1 and 2 (priority 0) re-arrive after every pick.
    q = queue_with(Priority(), [(0, 0.0, 5), (1, 1.0, 0), (2, 2.0, 0)])
    served, clock = [], 3.0
    for _ in range(6):
        (entry,) = q.pick()
        w = entry.draft.worker
        served.append(w)
        if w != 0:
            q.push(Draft.chain(w, w, 1, [1]), b"", arrival=clock, verified_tokens=0, priority=0, round=1)
            clock += 1
    assert served == [1, 2, 1, 2, 1, 2]
    (entry,) = q.pick()
    assert entry.draft.worker in (1, 2)


# -- round-robin ------------------------------------------------------------------------------------

def test_round_robin_cycles_over_worker_ids_not_arrivals():
    drafts = [ready(2, 1.0, 0), ready(0, 2.0, 1), ready(3, 3.0, 2), ready(1, 4.0, 3)]
    assert drain(RoundRobin(), drafts) == [0, 1, 2, 3]


def test_round_robin_continues_after_the_last_worker_served_and_wraps():
    rr = RoundRobin()
    assert rr.pick([ready(1, 1.0, 0), ready(3, 2.0, 1)]).worker == 1
    # worker 0 arrived before worker 3, but 3 comes next in cyclic order after 1
    assert rr.pick([ready(0, 0.5, 2), ready(3, 2.0, 1)]).worker == 3
    assert rr.pick([ready(0, 0.5, 2), ready(2, 3.0, 4)]).worker == 0   # wrap around
    assert rr.pick([ready(1, 3.5, 5), ready(2, 3.0, 4)]).worker == 1


def test_round_robin_does_not_serve_a_fast_worker_twice_while_another_waits():
    # Worker 0 re-drafts instantly and is always the earliest arrival; FCFS would serve it every time.
    def scenario(policy: Policy) -> list[int]:
        q = queue_with(policy, [(0, 0.0, 0), (1, 0.5, 0), (2, 0.7, 0)])
        served, clock = [], 1.0
        for _ in range(6):
            (entry,) = q.pick()
            w = entry.draft.worker
            served.append(w)
            # the served worker's next draft arrives; worker 0's arrives "earlier" than anyone waiting
            arrival = -clock if w == 0 else clock
            q.push(Draft.chain(w, w, 1, [1]), b"", arrival=arrival, verified_tokens=0, priority=0, round=1)
            clock += 1
        return served

    assert scenario(RoundRobin()) == [0, 1, 2, 0, 1, 2]
    assert scenario(FCFS()) == [0, 0, 0, 0, 0, 0]


def test_round_robin_breaks_ties_within_one_worker_by_arrival():
    # In sd mode one worker owns several sequences: its drafts are served oldest first.
    drafts = [ready(0, 2.0, 0, seq=7), ready(0, 1.0, 1, seq=8), ready(1, 0.0, 2)]
    rr = RoundRobin()
    first = rr.pick(drafts)
    assert (first.worker, first.seq) == (0, 8)


# -- batch ------------------------------------------------------------------------------------------

# Arrival order (arrival time, then counter): 4 (0.5), 1 (1.0, #1), 3 (1.0, #3), 2 (2.0), 0 (3.0).
# Worker ids, priorities and list order all disagree with it.
MIXED = [ready(0, 3.0, 0, priority=0), ready(1, 1.0, 1, priority=5), ready(2, 2.0, 2, priority=-1),
         ready(3, 1.0, 3, priority=9), ready(4, 0.5, 4, priority=2)]


def batch(max_batch: int) -> Batch:
    return Batch(PolicySettings(max_batch=max_batch))


@pytest.mark.parametrize("max_batch, workers", [
    (1, [4]),
    (2, [4, 1]),
    (3, [4, 1, 3]),          # equal arrivals: the lower counter first
    (5, [4, 1, 3, 2, 0]),
    (9, [4, 1, 3, 2, 0]),    # a limit above the queue's length takes what is there
    (0, [4, 1, 3, 2, 0]),    # 0 = no limit: every ready draft
])
def test_batch_takes_the_oldest_ready_drafts_in_fcfs_order_up_to_max_batch(max_batch, workers):
    picked = batch(max_batch).pick(list(MIXED))
    assert [d.worker for d in picked] == workers
    assert all(d in MIXED for d in picked)  # drafts it was given, each once (the workers above are distinct)


def test_batch_order_does_not_depend_on_the_order_drafts_are_handed_over():
    for handed in (MIXED, MIXED[::-1], MIXED[2:] + MIXED[:2]):
        assert [d.worker for d in batch(0).pick(list(handed))] == [4, 1, 3, 2, 0]
        assert [d.worker for d in batch(2).pick(list(handed))] == [4, 1]


def test_batch_through_the_run_queue_serves_batches_oldest_first():
    q = queue_with(batch(2), [(2, 5.0, 0), (0, 5.0, 0), (1, 4.0, 0), (3, 6.0, 0), (4, 1.0, 0)])
    batches = []
    while len(q):
        batches.append([e.draft.worker for e in q.pick()])
    assert batches == [[4, 1], [2, 0], [3]]
    q = queue_with(batch(0), [(2, 5.0, 0), (0, 5.0, 0), (1, 4.0, 0)])
    assert [e.draft.worker for e in q.pick()] == [1, 2, 0] and len(q) == 0


@pytest.mark.parametrize("flags, max_batch", [
    ([], 0),                        # with --policy batch, the default is every ready draft
    (["--max-batch", "2"], 2),
    (["--max-batch", "1"], 1),      # said explicitly, 1 is one draft per forward (not the unset default)
    (["--max-batch", "0"], 0),
])
def test_max_batch_reaches_the_batch_policy_from_the_command_line(flags, max_batch):
    args = build_parser().parse_args(["run", "--prompt", "hi", "--backend", "sim", "--policy", "batch", *flags])
    config = config_from_args(args)
    assert config.max_batch == max_batch
    policy = start_policy(config)     # what the verifier constructs
    assert isinstance(policy, Batch) and policy.settings.max_batch == max_batch
    assert [d.worker for d in policy.pick(list(MIXED))] == [4, 1, 3, 2, 0][:max_batch or None]


def test_other_policies_keep_one_draft_per_forward_by_default():
    assert start_policy(RunConfig(policy="fcfs")).settings.max_batch == 1
