"""A dsbd beam worker that dies while it drafts is restarted and rejoins its slot's round: the verifier holds
the slot's beam, so the new process asks it where the slot stands and drafts that round again - the same tree,
from the slot's and round's own stream - and the beams are the undisturbed run's, greedy and sampled. Trees and
resumes of a dead incarnation are refused; beyond the restart intensity the job fails in one line."""

from __future__ import annotations

import random
import time

import numpy as np
import psutil
import pytest
from helpers import draft_model, sim_config, target_model, words
from loopback_decode import NoTelemetry
from process_watch import kill_one

from specsched.runtime.backends.sim import EOS
from specsched.runtime.core.beam_messages import BeamTask, TreeDraft
from specsched.runtime.core.beams import beam_stream
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.core.transport import worker_identity
from specsched.runtime.core.wire import ProtocolError
from specsched.runtime.engine.engine import Engine
from specsched.scheduler.beam_decode import beam_decode
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier
from specsched.workers.beam_drafter import draft_tree

VOCAB, SEED, TOKENS = 16, 3, 200
# a dynamic-width run to kill in: at SEED every beam ends (EOS) within 31 commits; at WIDE_SEED it runs to the
# token limit, 179 commits at TOKENS, its slots leaving and joining 77 times at twice TOKENS
WIDE_SEED = 0
PROMPTS = [(5, 7), (3, 9, 2)]
EMPTY = np.zeros(0, np.int32)


def search(prompt, steps: int) -> list[list[int]]:
    """Beam search's beams, cut after an end of sequence as a record gives them."""
    beams = beam_decode(target_model(VOCAB), list(prompt), SamplingParams(0.0), 3, steps)
    return [b[: b.index(EOS) + 1] if EOS in b else b for b in beams.tokens]


def no_orphans() -> bool:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE] == []


# -- the verifier's side ---------------------------------------------------------------------------------
def desk() -> Verifier:
    """A verifier holding one sampled dsbd sequence (7) of two slots, drafted by workers 10 and 11."""
    config = RunConfig.of(backend="sim", mode="dsbd", sim_vocab=VOCAB, beams=2, gamma=2, temperature=1.0, seed=SEED,
                          prompts=["x"])
    v = Verifier(target_model(VOCAB), NoTelemetry())
    v.add_job(JobState.from_message({"job": 0, "config": config.to_dict(), "sequences": [[7, 0, 10, [1, 2]]],
                                     "beam_workers": [[10, 11]]}, v.target))
    return v


def resume(v: Verifier, slot: int, worker: int, epoch: int, want: int = -1, sender: int | None = None) -> BeamTask:
    fields = {"seq": 7, "slot": slot, "worker": worker, "epoch": epoch, "want": want}
    return v.resume_beam(fields, worker_identity(worker if sender is None else sender)).verdict


def tree(task: BeamTask, worker: int, epoch: int = 0) -> TreeDraft:
    """The slot's tree for its task, drafted into a fresh cache from the slot's stream of that round."""
    model = draft_model(VOCAB, 0.7)
    drafted = draft_tree(model, model.new_cache(), task.context.tolist(), task.logprob, SamplingParams(1.0),
                         task.counts.tolist(), beam_stream(SEED, 0, task.slot, task.round))
    return TreeDraft(7, worker, task.slot, task.round, *drafted.to_arrays(), epoch=epoch)


def round_one(v: Verifier) -> dict[int, BeamTask]:
    """Round 0 (both slots say they are there), verified: each slot's task for round 1."""
    for slot, worker in ((0, 10), (1, 11)):
        v.admit_tree(TreeDraft(7, worker, slot, 0, EMPTY, EMPTY, EMPTY), worker_identity(worker), 0.0)
    return {r.verdict.slot: r.verdict for r in v.step(0.0)}


def test_a_restarted_beam_worker_drafts_its_slots_round_again_and_the_dead_ones_tree_is_refused():
    v = desk()
    tasks = round_one(v)
    first = tree(tasks[0], 10)
    v.admit_tree(first, worker_identity(10), 0.0)
    v.admit_tree(tree(tasks[1], 11), worker_identity(11), 0.0)
    assert len(v.queue) == 1  # the round is complete: queued
    again = resume(v, 0, 10, epoch=1)  # worker 10 died having sent its tree; its successor asks
    assert (again.round, again.done, again.epoch) == (1, False, 1) and len(v.queue) == 0
    assert again.context.tolist() == tasks[0].context.tolist() and again.logprob == tasks[0].logprob
    assert again.counts.tolist() == tasks[0].counts.tolist()
    with pytest.raises(ProtocolError, match="epoch 0"):  # the dead process's tree, arriving late
        v.admit_tree(first, worker_identity(10), 0.0)
    redrafted = tree(again, 10, epoch=1)
    for a, b in zip(first.to_frames()[1:], redrafted.to_frames()[1:]):  # the same draws: tokens, parents, q
        assert bytes(a) == bytes(b)
    v.admit_tree(redrafted, worker_identity(10), 0.0)
    assert len(v.queue) == 1
    for epoch, sender in ((1, 10), (0, 10), (2, 12)):  # stale (twice); forged
        with pytest.raises(ProtocolError, match="newest incarnation|not from its worker"):
            resume(v, 0, 10, epoch, sender=sender)
    assert len(v.queue) == 1 and set(v.book.beam_rounds.seqs[7].trees) == {0, 1}


def test_a_restart_in_round_zero_says_there_again_and_the_round_goes_on():
    v = desk()
    v.admit_tree(TreeDraft(7, 10, 0, 0, EMPTY, EMPTY, EMPTY), worker_identity(10), 0.0)
    again = resume(v, 0, 10, epoch=1)
    assert (again.round, again.done, again.context) == (0, False, None)  # no beam yet: an empty tree
    v.admit_tree(TreeDraft(7, 10, 0, 0, EMPTY, EMPTY, EMPTY, epoch=1), worker_identity(10), 0.0)
    v.admit_tree(TreeDraft(7, 11, 1, 0, EMPTY, EMPTY, EMPTY), worker_identity(11), 0.0)
    assert {r.verdict.slot: r.verdict.epoch for r in v.step(0.0)} == {0: 1, 1: 0}  # each task for its epoch


def test_a_restart_takes_a_join_its_predecessor_never_made_and_is_told_done_for_a_slot_it_left():
    v = desk()
    round_one(v)
    seq = v.book.beam_rounds.seqs[7]
    seq.st.beam_workers[1], seq.wanted = -1, {1: 1}  # slot 1 left, then wanted again in round 1
    assert resume(v, 1, 11, epoch=1).done  # its worker had left it: the engine sends another
    assert resume(v, 1, 12, epoch=1, want=0).done  # sent to join an earlier request, not this one
    given = resume(v, 1, 12, epoch=1, want=1)  # sent to join this one, died before it did: it joins now
    assert not given.done and given.context.tolist() == seq.contexts[1] and seq.st.beam_workers == [10, 12]
    with pytest.raises(ProtocolError, match="not a slot waiting"):  # the dead process's join, arriving late
        v.join_beam({"seq": 7, "slot": 1, "worker": 12, "want": 1, "epoch": 0}, worker_identity(12))
    seq.st.done = True
    assert resume(v, 0, 10, epoch=1).done  # the sequence is finished
    v.finish_job(v.jobs[0])
    assert resume(v, 0, 10, epoch=2).done  # and its job closed: the verifier holds nothing of it


# -- through the runtime ---------------------------------------------------------------------------------
def drafting_workers(e: Engine, killed: set[int]) -> list[dict]:
    """Beam workers drafting now (a process killed a moment ago may still be listed, until it is reaped)."""
    return [p for p in e.processes if p["role"] == "draft" and p["state"] == "drafting" and p["pid"] not in killed]


def run_with_kills(kills_wanted: int, *, victims=drafting_workers, every: int = 20, **settings):
    """A beam job (dsbd unless `mode` says otherwise) during which one of `victims(engine, killed)` - drafting
    beam workers unless told - is SIGKILLed once the job has received `every` commits since the last kill,
    `kills_wanted` times; and the same job undisturbed, on the same engine. Kills paced by the job's progress,
    not by a clock, land at the same points of the run on a quiet machine and on a loaded one."""
    config = sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=5, max_restarts=100, restart_period_s=1)
    settings = {"mode": "dsbd", "beams": 3, "gamma": 2, "draft_beams": 4, "sim_agreement": 0.8,
                "max_new_tokens": TOKENS, **settings}
    prompts = [words(VOCAB, p) for p in PROMPTS]
    rng, kills, killed = random.Random(1), 0, set()
    with Engine(config) as e:
        undisturbed = e.generate(prompts, **settings)
        assert len(undisturbed.collected.commits) > (kills_wanted + 1) * every, "too short a run to kill in"
        job = e.submit(prompts, **settings)
        deadline = time.monotonic() + 60
        while kills < kills_wanted and not job.done():
            assert time.monotonic() < deadline
            time.sleep(0.005)
            # a process killed after the job ended is restarted outside it: its record holds no such restart
            if len(job.collected.commits) >= (kills + 1) * every and not job.done() and (rows := victims(e, killed)):
                kills += kill_one(rows, rng, killed)
        record = job.result(timeout=120)
    assert no_orphans()
    assert kills == kills_wanted, "the run ended before the test could kill enough processes"
    assert record.status == "ok", record.error
    return record, undisturbed, kills


@pytest.mark.parametrize("settings", [
    pytest.param(dict(temperature=0.0), marks=pytest.mark.slow),                    # beam search (slow set)
    dict(temperature=1.0, seed=SEED),                                               # beam sampling
    dict(temperature=1.0, seed=WIDE_SEED, beam_threshold=0.5, min_beams=1),         # slots left and joined
    dict(temperature=1.0, seed=SEED, beam_input="best"),                            # drafts from the best beam
], ids=["greedy", "sampled", "dynamic-width", "best-input"])
def test_killed_drafting_beam_workers_are_restarted_and_the_beams_are_the_undisturbed_runs(settings):
    record, undisturbed, kills = run_with_kills(3, **settings)
    assert record.collected.beams == undisturbed.collected.beams  # every beam, token for token, and its joint
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert len(record.collected.restarts) == kills
    assert all(r["process"].startswith("draft-") and "exited with status -9" in r["why"] and r["epoch"] >= 1
               for r in record.collected.restarts)
    assert sum(kind == "restart" for _, _, kind in record.collected.marks) == kills
    if not settings["temperature"]:
        assert [record.collected.beams[str(i)]["tokens"] for i in range(len(PROMPTS))] == [
            search(p, TOKENS) for p in PROMPTS]


def test_beyond_the_restart_intensity_a_dead_beam_worker_fails_its_job_keeps_what_every_beam_holds():
    prompts = [words(VOCAB, p) for p in PROMPTS]
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=2, sim_verify_ms=4, max_restarts=0)) as e:
        job = e.submit(prompts[:1], mode="dsbd", beams=3, max_new_tokens=100_000)
        deadline = time.monotonic() + 60
        while not job.collected.tokens.get(0):  # some tokens every beam holds are committed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim = next(p for p in e.processes if p["name"] == "draft-1")  # a beam slot's worker
        psutil.Process(victim["pid"]).kill()
        record = job.result(timeout=60)
        assert record.status == "failed" and "draft-1 died more than 0 times within 5 s" in record.error
        assert "draft-1 exited with status -9" in record.error and not e.broken
        kept = record.sequences[0].tokens
        assert kept and all(b[:len(kept)] == kept for b in search(PROMPTS[0], len(kept) + 40))  # final: every
        # beam of the search holds it
        again = e.generate(prompts, mode="dsbd", beams=3, max_new_tokens=8)  # the engine goes on
        assert again.status == "ok"
        assert [again.collected.beams[str(i)]["tokens"] for i in range(len(PROMPTS))] == [search(p, 8) for p in PROMPTS]
    assert no_orphans()
