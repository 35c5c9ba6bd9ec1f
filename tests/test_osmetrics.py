"""OS scheduling metrics against hand-computed examples, OSTEP style (Operating Systems: Three Easy
Pieces, ch. 7): given arrivals and service times, work out turnaround, waiting and response.

A job is a draft worker; "running" is the verifier verifying one of its drafts. Each job here
arrives at t = 0 with a draft of no length, so its turnaround is simply its completion time.
"""

from __future__ import annotations

import random

import pytest

from specsched.runtime.core.events import VERIFIER, Event
from specsched.runtime.engine.osmetrics import jain, measure, starvation_bound


def serve(order: list[tuple[int, float]], arrival: float = 0.0) -> list[Event]:
    """Non-preemptive service of one draft per worker in ``order`` [(worker, service time)]."""
    events, t = [], arrival
    for worker, service in order:
        events += [Event(10 + worker, "draft", worker, "draft", arrival, arrival, worker),
                   Event(10 + worker, "draft", worker, "queued", arrival, t, worker),
                   Event(10 + worker, "draft", worker, "verify", t, t + service, worker),
                   Event(1, "verifier", VERIFIER, "verify", t, t + service, worker)]
        t += service
    return events


def test_fcfs_three_equal_jobs():
    # A, B, C arrive at 0 and need 10 each; FCFS runs A [0,10], B [10,20], C [20,30]
    m = measure(serve([(0, 10), (1, 10), (2, 10)]), {0: 4, 1: 4, 2: 4})
    assert [w.turnaround_s for w in m.workers] == [10, 20, 30]
    assert [w.waiting_s for w in m.workers] == [0, 10, 20]
    assert [w.response_s for w in m.workers] == [0, 10, 20]
    assert (m.mean_turnaround_s, m.mean_waiting_s, m.mean_response_s) == (20, 10, 10)
    assert m.jain_service == 1.0 and m.jain_tokens == 1.0
    assert m.utilisation == 1.0 and m.throughput == pytest.approx(12 / 30)
    # C waited 20 s and saw B verified meanwhile (A started the instant C arrived): 1 bypass
    assert (m.max_wait_s, m.max_wait_worker) == (20, 2)
    assert (m.max_bypassed, m.max_bypassed_worker, m.starvation_bound, m.starved) == (1, 2, 4, False)


def test_convoy_effect_fcfs_against_shortest_first():
    # OSTEP's convoy: A needs 100, B and C 10. FCFS: turnaround 100, 110, 120 (mean 110);
    # shortest first: B 10, C 20, A 120 (mean 50); the verifier time shares are (100, 10, 10)
    fcfs = measure(serve([(0, 100), (1, 10), (2, 10)]), {0: 1, 1: 1, 2: 1})
    sjf = measure(serve([(1, 10), (2, 10), (0, 100)]), {0: 1, 1: 1, 2: 1})
    assert [w.turnaround_s for w in fcfs.workers] == [100, 110, 120] and fcfs.mean_turnaround_s == 110
    assert [w.turnaround_s for w in sjf.workers] == [120, 10, 20] and sjf.mean_turnaround_s == 50
    assert fcfs.mean_waiting_s == pytest.approx(70) and sjf.mean_waiting_s == pytest.approx(10)
    # Jain over verifier time: (120)^2 / (3 * (100^2 + 10^2 + 10^2)) = 14400 / 30600
    assert fcfs.jain_service == pytest.approx(14400 / 30600)


def test_two_rounds_with_an_idle_verifier():
    # each worker drafts 2 s then waits for a 1 s verification, twice; worker 1 queues behind 0 once
    e = [Event(1, "verifier", VERIFIER, "verify", a, b, s)
         for a, b, s in ((2, 3, 0), (3, 4, 1), (5, 6, 0), (6, 7, 1))]
    kinds = ("draft", "queued", "verify") * 2
    w0 = ((0, 2), (2, 2), (2, 3), (3, 5), (5, 5), (5, 6))
    w1 = ((0, 2), (2, 3), (3, 4), (4, 6), (6, 6), (6, 7))
    e += [Event(10, "draft", 0, k, a, b, 0) for k, (a, b) in zip(kinds, w0)]
    e += [Event(11, "draft", 1, k, a, b, 1) for k, (a, b) in zip(kinds, w1)]
    m = measure(e, {0: 8, 1: 8})
    assert [(w.turnaround_s, w.waiting_s, w.response_s, w.service_s, w.verifications) for w in m.workers] == \
        [(6, 0, 0, 2, 2), (7, 1, 1, 2, 2)]
    assert m.utilisation == pytest.approx(4 / 7)      # busy 4 s of the 7 s window, idle 0-2 and 4-5
    assert m.throughput == pytest.approx(16 / 7)


def test_jain_index():
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25                 # one of n gets everything: 1/n
    assert jain([3, 1]) == pytest.approx(16 / 20)     # (3 + 1)^2 / (2 (9 + 1))
    assert jain([]) is None and jain([0, 0]) is None


def test_priority_starvation_is_flagged():
    # worker 2 arrives at 0 but waits while workers 0 and 1 are each served five times: the nine
    # verifications that start after it arrived (0 s) and before its own (10 s) bypass it
    events = serve([(0, 1), (1, 1)] * 5 + [(2, 1)])
    m = measure(events, {0: 5, 1: 5, 2: 1})
    assert m.max_bypassed == 9 > starvation_bound(3) == 4
    assert m.starved and m.max_bypassed_worker == 2 and m.max_wait_worker == 2


def test_result_does_not_depend_on_event_order():
    events = serve([(w, 0.1 * (w + 1) + 1e-9 * w) for w in range(6)] * 3)
    first = measure(events, {w: 3 for w in range(6)})
    shuffled = events[:]
    random.Random(0).shuffle(shuffled)
    assert measure(shuffled, {w: 3 for w in range(6)}) == first   # exact: math.fsum
