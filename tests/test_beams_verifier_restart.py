"""A beam job survives its verifier: the verifier reports each round's beams with the round's commit, the
engine announces the job to a new verifier with the last report, and the new verifier goes on from that round
- every draw of a round keyed by the round - so the beams are the undisturbed run's, greedy and sampled, in
``--mode beam`` and ``dsbd`` (fixed and dynamic width). Without restarts the job fails in one line, its tokens
kept."""

from __future__ import annotations

import time

import numpy as np
import psutil
import pytest
from helpers import sim_config, target_model, words
from process_watch import kill_the_verifier_once_it_commits
from test_beams_restart import SEED, VOCAB, WIDE_SEED, desk, no_orphans, resume, round_one, run_with_kills, search, tree

from specsched.runtime.core.beam_state import BeamState
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.transport import worker_identity
from specsched.runtime.core.wire import REFUSED
from specsched.runtime.engine.engine import Engine
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier

PROMPTS = [(5, 7), (3, 9, 2)]
TOKENS = 200


class Commits:
    """The verifier's telemetry, keeping what the engine keeps of each commit: the tokens and the beams."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.beams: dict | None = None

    def send(self, kind: str, fields: dict, arrays: dict | None = None) -> None:
        if kind == "commit":
            self.tokens += arrays["tokens"].tolist()
            self.beams = fields["beam"]

    def events(self, rows) -> None:
        pass


def play_round(v: Verifier, tasks: dict, epoch: int = 0) -> dict:
    """Every slot (worker 10 + slot) drafts its task's tree; the round is verified: each slot's next task."""
    for slot, task in sorted(tasks.items()):
        assert not task.done
        v.admit_tree(tree(task, 10 + slot, epoch), worker_identity(10 + slot), 0.0)
    return {r.verdict.slot: r.verdict for r in v.step(0.0)}


def same_task(a, b) -> bool:
    def arrays(t):
        return None if t.context is None else (t.context.tolist(), t.counts.tolist())
    return (a.round, a.done, a.logprob, arrays(a)) == (b.round, b.done, b.logprob, arrays(b))


def test_a_new_verifier_given_the_last_rounds_beams_goes_on_as_the_dead_one_would():
    dead, telemetry = desk(), Commits()
    dead.telemetry = telemetry
    tasks = round_one(dead)
    for _ in range(3):
        tasks = play_round(dead, tasks)
    new = announced_again(dead, telemetry)
    again = {slot: resume(new, slot, 10 + slot, epoch=1) for slot in (0, 1)}  # each slot's worker, resynced
    assert all(same_task(again[s], tasks[s]) for s in (0, 1)) and again[0].round == 4
    while not tasks[0].done:  # the same rounds to the end: the same beams, the same draws
        tasks, again = play_round(dead, tasks), play_round(new, again, epoch=1)
        assert all(same_task(again[s], tasks[s]) for s in (0, 1))
    assert new.seqs[7].generated == dead.seqs[7].generated
    assert new.book.beam_rounds.result(new.jobs[0]) == dead.book.beam_rounds.result(dead.jobs[0])
    finished = announced_again(dead, telemetry)  # the last report: the final beams, for the job's record
    assert finished.jobs[0].done
    assert finished.book.beam_rounds.result(finished.jobs[0]) == new.book.beam_rounds.result(new.jobs[0])


def announced_again(dead: Verifier, telemetry: Commits) -> Verifier:
    """A new verifier, given the job as the engine re-announces it: what is committed, and the last beams."""
    v = Verifier(target_model(VOCAB), Commits())
    v.add_job(JobState.from_message({"job": 0, "config": dead.jobs[0].config.to_dict(),
                                     "sequences": [[7, 0, 10, [1, 2]]], "beam_workers": [[10, 11]],
                                     "generated": [telemetry.tokens], "done": [telemetry.beams["done"]],
                                     "beam_states": [telemetry.beams]}, v.target))
    return v


@pytest.mark.parametrize("broken", [
    {"tails": [[1, 2], [3]]},                  # ragged: beams of a step have equal lengths
    {"logprobs": [0.0]},                       # a log-probability short
    {"tails": [[1], [-4]]},                    # a negative token
    {"tails": [[1], [2**40]]},                 # a token beyond int32
    {"slots": [10, 11], "wanted": [-1]},       # a slot without its request
    {"round": -1},
    {"tails": "xy"},
])
def test_a_malformed_beam_state_is_refused(broken):
    good = {"round": 3, "steps": 5, "base": 1, "tails": [[4], [6]], "logprobs": [-1.5, -2.0], "slots": [10, 11],
            "wanted": [-1, -1], "done": False}
    assert BeamState.from_dict(good).beams([9, 9]) == [[9, 4], [9, 6]]
    with pytest.raises(REFUSED):
        BeamState.from_dict({**good, **broken})


# -- through the runtime ---------------------------------------------------------------------------------
def live_verifier(e: Engine, killed: set[int]) -> list[dict]:
    return [p for p in e.processes if p["role"] == "verifier" and p["pid"] not in killed]


def run_with_verifier_kills(kills_wanted: int, **settings):
    """A beam job during which the verifier is SIGKILLed after every 40 commits, `kills_wanted` times; and the
    same job undisturbed, on the same engine. Twice the usual tokens: each new verifier then has a long run."""
    return run_with_kills(kills_wanted, victims=live_verifier, every=40, max_new_tokens=2 * TOKENS, **settings)


@pytest.mark.parametrize("settings", [
    pytest.param(dict(mode="beam", temperature=0.0), marks=pytest.mark.slow),       # beam search
    dict(mode="beam", temperature=1.0, seed=SEED),                                  # beam sampling
    pytest.param(dict(mode="dsbd", temperature=0.0), marks=pytest.mark.slow),  # greedy: the slow set (CI)
    dict(mode="dsbd", temperature=1.0, seed=SEED),
    dict(mode="dsbd", temperature=1.0, seed=WIDE_SEED, beam_threshold=0.5, min_beams=1),  # slots left, joined
    dict(mode="dsbd", temperature=1.0, seed=SEED, beam_input="best"),               # drafts from the best beam
], ids=["beam-greedy", "beam-sampled", "dsbd-greedy", "dsbd-sampled", "dsbd-dynamic-width", "dsbd-best-input"])
def test_a_killed_verifier_is_restarted_and_the_beams_are_the_undisturbed_runs(settings):
    record, undisturbed, kills = run_with_verifier_kills(2, **settings)
    assert record.collected.beams == undisturbed.collected.beams  # every beam, token for token, and its joint
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    assert [r["process"] for r in record.collected.restarts] == ["verifier"] * kills
    assert all("exited with status -9" in r["why"] and r["reprefilled_tokens"] > 0 for r in record.collected.restarts)
    if not settings["temperature"]:
        assert [record.collected.beams[str(i)]["tokens"] for i in range(len(PROMPTS))] == [
            search(p, 2 * TOKENS) for p in PROMPTS]


def test_without_restarts_a_killed_verifier_fails_a_dsbd_job_in_one_line_and_keeps_what_every_beam_holds():
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=2, sim_verify_ms=4, max_restarts=0)) as e:
        job = e.submit([words(VOCAB, PROMPTS[0])], mode="dsbd", beams=3, max_new_tokens=100_000)
        kill_the_verifier_once_it_commits(e, job)
        record = job.result(timeout=60)
        assert record.status == "failed" and "verifier died more than 0 times" in record.error
        assert "verifier exited with status -9" in record.error and "\n" not in record.error
        assert e.broken == record.error
        kept = record.sequences[0].tokens
        assert kept and all(b[:len(kept)] == kept for b in search(PROMPTS[0], len(kept) + 40))
    assert no_orphans()


@pytest.mark.slow
def test_on_transformers_a_killed_verifier_leaves_a_dsbd_jobs_beams_unchanged(tmp_path):
    """On hf a fresh target cache's logits may differ from the cached ones in their last bits (README, Floating
    point): the beams are the same, their log-probabilities equal to a few ulps."""
    from tests.tiny_hf import make_pair

    target, draft = make_pair(tmp_path)
    prompts = ["w1 w2 w3", "w5 w6"]
    settings = dict(mode="dsbd", beams=3, gamma=2, max_new_tokens=160)
    with Engine(RunConfig.of(backend="hf", target=str(target), draft=str(draft), max_restarts=10)) as e:
        undisturbed = e.generate(prompts, **settings)
        job = e.submit(prompts, **settings)
        deadline = time.monotonic() + 120
        while len(job.collected.tokens.get(0, [])) < 8:
            assert time.monotonic() < deadline and not job.done()
            time.sleep(0.01)
        psutil.Process(next(p["pid"] for p in e.processes if p["name"] == "verifier")).kill()
        record = job.result(timeout=300)
    assert no_orphans()
    assert record.status == "ok", record.error
    assert [r["process"] for r in record.collected.restarts] == ["verifier"]
    for i in range(len(prompts)):
        got, want = record.collected.beams[str(i)], undisturbed.collected.beams[str(i)]
        assert got["tokens"] == want["tokens"]
        np.testing.assert_allclose(got["logprobs"], want["logprobs"], rtol=1e-5)
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
