"""The zygote (runtime/engine/zygote.py) is supervised like every child: killed, it is started again, every
child that died with it is restarted and resumes, and the run's text is the undisturbed run's; beyond the
restart intensity every job fails in one line that names the zygote. No process is left behind."""

from __future__ import annotations

import time

import psutil
import pytest
from helpers import sim_config, words

from specsched.runtime.engine.engine import Engine

VOCAB = 16
PROMPTS = [words(VOCAB, (5, 7)), words(VOCAB, (3, 9))]


def zygotes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE
            and p.cmdline()[:1] == ["specsched: zygote"]]


def descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def kill_zygote_once_committing(e: Engine, job, after: int) -> int:
    """SIGKILL the zygote once the job has committed `after` tokens more than now and the zygote is the parent
    of every live child of the engine; its pid. After an earlier kill, the dead verifier's last commits can
    arrive while the new zygote is still being started: the wait is for both."""
    committed = sum(map(len, job.collected.tokens.values()))
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline and not job.done()
        found = zygotes()
        live = [p["pid"] for p in e.processes if p["state"] != "exited"]  # a child being started has no pid yet
        if (sum(map(len, job.collected.tokens.values())) >= committed + after and len(found) == 1
                and None not in live and sorted(c.pid for c in found[0].children()) == sorted(live)):
            break
        time.sleep(0.01)
    found[0].kill()  # PR_SET_PDEATHSIG: every child dies with it
    return found[0].pid


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_killed_zygote_is_started_again_and_the_text_is_the_undisturbed_runs(temperature):
    settings = dict(max_new_tokens=200, temperature=temperature, coupling="gumbel", seed=3)
    with Engine(sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=10)) as e:
        undisturbed = e.generate(PROMPTS, **settings)
        job = e.submit(PROMPTS, **settings)
        first = kill_zygote_once_committing(e, job, 10)
        record = job.result(timeout=120)
        (zygote,) = zygotes()
        assert zygote.pid != first
    assert descendants() == []
    assert record.status == "ok", record.error
    assert [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences]
    restarts = record.collected.restarts
    assert restarts[0]["process"] == "zygote" and "the zygote exited with status -9" in restarts[0]["why"]
    assert sorted(r["process"] for r in restarts[1:]) == ["draft-0", "draft-1", "verifier"]
    assert all("died with the zygote" in r["why"] for r in restarts[1:])


def test_a_zygote_that_keeps_dying_fails_every_job_in_one_line_and_leaves_nothing():
    config = sim_config(sim_vocab=VOCAB, sim_draft_ms=5, sim_verify_ms=10, max_restarts=1, restart_period_s=60)
    with Engine(config) as e:
        job = e.submit(PROMPTS, max_new_tokens=100_000)
        kill_zygote_once_committing(e, job, 5)
        kill_zygote_once_committing(e, job, 5)
        record = job.result(timeout=60)
    assert descendants() == []
    assert record.status == "failed"
    assert record.error.startswith("the zygote died more than 1 times within 60 s (--max-restarts 1")
    assert sum(len(s.tokens) for s in record.sequences) >= 10  # every verified token kept: 5 + 5 before the kills
