"""The recorded timeline: in seed mode the draft workers really draft at the same time (separate
processes, overlapping intervals), while the verifier verifies; and the tcp transport works.

Overlap is judged from the recorded event intervals (one monotonic clock for every process), never
from wall-clock speed-ups.
"""

from __future__ import annotations

import itertools

import pytest
from helpers import greedy_reference, outputs, run_ok, sim_config, words

VOCAB = 64
PROMPTS = [(5, 7), (3, 9), (11, 13)]


def intervals(record, role: str, kind: str):
    return [e for e in record.collected.events if e.role == role and e.kind == kind]


def overlap(a, b) -> bool:
    return max(a.start, b.start) < min(a.end, b.end)


def slow_draft_run(mode: str):
    # 30 ms per draft forward and 3 forwards per draft: each draft interval lasts about 90 ms
    return run_ok(sim_config(mode=mode, workers=3, prompts=[words(VOCAB, p) for p in PROMPTS], k=3,
                             max_new_tokens=12, sim_draft_ms=30.0, sim_verify_ms=10.0))


@pytest.fixture(scope="module")
def seed_record():
    return slow_draft_run("seed")


def test_in_seed_mode_draft_workers_draft_at_the_same_time_in_separate_processes(seed_record):
    record = seed_record
    drafts = intervals(record, "draft", "draft")
    assert {e.worker for e in drafts} == {0, 1, 2}
    # each worker is its own process, distinct from the verifier
    pids = {e.worker: e.pid for e in drafts}
    verifier_pids = {e.pid for e in record.collected.events if e.role == "verifier"}
    assert len(set(pids.values())) == 3 and len(verifier_pids) == 1
    assert verifier_pids.isdisjoint(pids.values())
    overlapping = {frozenset((a.worker, b.worker)) for a, b in itertools.combinations(drafts, 2)
                   if a.worker != b.worker and overlap(a, b)}
    assert overlapping, "no two workers were ever drafting at the same time"
    # and drafting goes on while the verifier verifies someone else's draft
    verifies = intervals(record, "verifier", "verify")
    assert any(overlap(d, v) and d.seq != v.seq for d in drafts for v in verifies)
    assert outputs(record) == [greedy_reference(p, VOCAB, 12) for p in PROMPTS]


def test_in_sd_mode_one_worker_drafts_one_sequence_at_a_time():
    # The same check on serial speculative decoding finds no overlap: it measures something.
    record = slow_draft_run("sd")
    drafts = intervals(record, "draft", "draft")
    assert {e.worker for e in drafts} == {0} and {e.seq for e in drafts} == {0, 1, 2}
    assert not any(overlap(a, b) for a, b in itertools.combinations(drafts, 2))
    # sequences one after another: every draft of sequence i ends before the first of sequence i + 1
    for i in (0, 1):
        assert max(e.end for e in drafts if e.seq == i) <= min(e.start for e in drafts if e.seq == i + 1)


def test_the_verifier_never_verifies_two_drafts_at_once(seed_record):
    busy = sorted(intervals(seed_record, "verifier", "verify") + intervals(seed_record, "verifier", "resample"),
                  key=lambda e: e.start)
    assert busy
    assert all(a.end <= b.start for a, b in zip(busy, busy[1:]))


def test_tcp_transport_gives_the_same_outputs_as_ipc():
    prompts = [words(VOCAB, p) for p in PROMPTS]
    record = run_ok(sim_config(workers=3, prompts=prompts, k=3, max_new_tokens=16, transport="tcp"))
    assert record.config.network.transport == "tcp"
    assert outputs(record) == [greedy_reference(p, VOCAB, 16) for p in PROMPTS]
    assert {e.role for e in record.collected.events} == {"verifier", "draft"}


def test_tcp_transport_sampled_matches_ipc_sampled():
    prompts = [words(VOCAB, p) for p in PROMPTS]
    common = {"workers": 3, "prompts": prompts, "k": 3, "max_new_tokens": 16, "temperature": 1.0, "seed": 5}
    assert outputs(run_ok(sim_config(transport="tcp", **common))) == outputs(run_ok(sim_config(**common)))
