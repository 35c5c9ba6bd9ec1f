"""Cores as a scheduled resource: the verifier's threads follow the draft workers that are busy."""

from __future__ import annotations

from helpers import run_ok, sim_config, target_model, words

from specsched.runtime.apps.run.report import summary_table
from specsched.scheduler.cores import Cores, describe, usable_cores
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier


def test_the_verifier_takes_the_cores_the_drafting_workers_leave():
    calls = []
    cores = Cores(calls.append, total=4)
    cores.assign(1, elastic=True)
    assert [cores.before_forward(d) for d in (3, 0, 0, 2, 9)] == [1, 4, 4, 2, 1]
    assert calls == [1, 4, 2, 1]  # torch is told only when the count changes


def test_a_fixed_count_ignores_the_workers():
    cores = Cores(total=4)
    cores.assign(3, elastic=False)
    assert cores.before_forward(0) == cores.before_forward(4) == 3


def test_forwards_are_counted_per_job_and_thread_count():
    cores = Cores(total=2)
    cores.add({0}, 1, 0.04)
    cores.add({0, 1}, 2, 0.03)
    cores.add({0}, 2, 0.01)
    assert cores.report(0) == {"1": [1, 0.04], "2": [2, 0.04]}
    assert cores.report(1) == {"2": [1, 0.03]}
    assert describe({"2": [2, 0.04], "1": [1, 0.04]}) == "1: 1 forwards (40.0 ms mean), 2: 2 forwards (20.0 ms mean)"


def test_in_lockstep_no_worker_drafts_while_the_verifier_runs_so_it_takes_every_core():
    prompts = [words(64, (5, 7)), words(64, (3, 9)), words(64, (11, 13))]
    record = run_ok(sim_config(mode="seed", workers=3, prompts=prompts, max_new_tokens=12, sim_vocab=64,
                               policy="batch", max_batch=0, lockstep=True))
    used = record.collected.verifier_threads
    assert set(used) == {str(usable_cores())}
    assert used[str(usable_cores())][0] == record.collected.counters["verifications"]
    rows = dict(summary_rows(record))
    assert rows["verifier threads"].startswith(f"{usable_cores()}: ")


def test_a_fixed_verifier_thread_count_is_kept():
    record = run_ok(sim_config(mode="seed", workers=2, prompts=[words(64, (5, 7))] * 2, max_new_tokens=8,
                               sim_vocab=64, verifier_threads=1))
    assert set(record.collected.verifier_threads) == {"1"}


def test_an_sd_worker_counts_as_drafting_only_while_its_current_sequence_is_not_being_verified():
    config = sim_config(mode="sd", workers=3, prompts=[words(64, (5, 7))] * 3)
    verifier = Verifier(target_model(64), None)
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[s, s, 0, [5, 7]] for s in range(3)]}, verifier.target))
    assert verifier.schedule.drafting_workers() == 1             # one worker, drafting its first sequence
    assert verifier.schedule.drafting_workers({0}) == 0          # its draft is being verified: no one drafts


def summary_rows(record):
    table = summary_table(record)
    return zip(table.columns[0]._cells, table.columns[1]._cells)
