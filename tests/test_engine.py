"""The engine keeps its processes: many jobs, arriving over time, on one verifier and one worker pool.

What a user notices: a job's tokens are those of a one-shot run of it whatever ran before or beside it;
jobs submitted together are served together; the models load once; `ps` names every process; nothing is
left behind by close(), idle retirement or a failure.
"""

from __future__ import annotations

import math
import subprocess
import threading
import time

import numpy as np
import psutil
import pytest
from helpers import outputs, run_ok, sim_config, words

from specsched.runtime.apps.run.app import run
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.engine.engine import Engine

VOCAB = 64
PROMPTS = [words(VOCAB, (5, 7)), words(VOCAB, (3, 9)), words(VOCAB, (11, 13))]
SAMPLED = dict(temperature=1.0, top_k=20, seed=5)


def engine(**kw) -> Engine:
    return Engine(sim_config(**kw))


def _children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("sampling", [{}, SAMPLED], ids=["greedy", "sampled"])
def test_a_job_gives_the_one_shot_tokens_after_other_jobs_and_beside_them(sampling):
    job = dict(prompts=PROMPTS, max_new_tokens=20, k=3, **sampling)
    one_shot = outputs(run_ok(sim_config(**job)))
    with engine() as e:
        e.generate(["lo mi"] * 2, max_new_tokens=9, seed=1)                 # history: another job first
        again = e.generate(config=sim_config(**job))
        beside = e.submit(config=sim_config(**job))  # the same job twice, running side by side
        mine = e.submit(config=sim_config(**job))
        assert outputs(again) == one_shot and outputs(mine.result()) == one_shot
        assert outputs(beside.result()) == one_shot
        sd = e.generate(config=sim_config(**{**job, "mode": "sd"}))       # same streams, another mode
        assert outputs(sd) == one_shot
        ar = e.generate(config=sim_config(**{**job, "mode": "ar"}))
        if not sampling:
            assert outputs(ar) == one_shot


def test_jobs_submitted_together_are_served_together_and_models_load_once():
    with engine(sim_draft_ms=2, sim_verify_ms=4) as e:
        first = e.generate(PROMPTS[:2], max_new_tokens=8)
        loaded = e.models_loaded  # the verifier and two workers
        assert loaded == 3 and first.extra["engine"]["models_loaded"] == 2
        a = e.submit(PROMPTS[:2], max_new_tokens=40)
        b = e.submit(PROMPTS[2:], workers=1, max_new_tokens=40)
        ra, rb = a.result(), b.result()
        # b needed a third worker: only that one was started
        assert e.models_loaded == loaded + 1 and rb.extra["engine"]["models_loaded"] == 1
        span = lambda r: (min(ev.start for ev in r.collected.events), max(ev.end for ev in r.collected.events))  # noqa: E731
        (a0, a1), (b0, b1) = span(ra), span(rb)
        assert b0 < a1 and a0 < b1, "the second job waited for the first instead of running beside it"
        assert ra.status == rb.status == "ok" and ra.extra["engine"]["job"] != rb.extra["engine"]["job"]


def test_a_job_under_another_policy_waits_for_the_running_ones():
    with engine(sim_draft_ms=2, sim_verify_ms=4) as e:
        a = e.submit(PROMPTS, max_new_tokens=30, policy="fcfs")
        b = e.submit(PROMPTS, max_new_tokens=10, policy="rr")
        ra, rb = a.result(), b.result()
        assert min(ev.start for ev in rb.collected.events) >= max(ev.end for ev in ra.collected.events)
        assert rb.extra["engine"]["queued_s"] > 0 and outputs(rb) == [t[:10] for t in outputs(ra)]


def test_ps_names_every_process_and_close_leaves_none():
    with engine() as e:
        e.generate(PROMPTS[:2], max_new_tokens=4)
        names = {p["name"]: p for p in e.processes}
        assert set(names) == {"verifier", "draft-0", "draft-1"}
        assert {p["state"] for p in names.values()} <= {"ready", "parked"}
        titles = subprocess.run(["ps", "-o", "args=", "-p", ",".join(str(p["pid"]) for p in names.values())],
                                capture_output=True, text=True).stdout.splitlines()
        assert sorted(t.strip() for t in titles) == ["specsched: draft 0 (parked)", "specsched: draft 1 (parked)",
                                                     "specsched: verifier"]
    assert _children() == []


def test_idle_workers_are_retired_and_new_ones_started_on_demand():
    with Engine(sim_config(), idle_timeout_s=0.2) as e:
        e.generate(PROMPTS[:2], max_new_tokens=4)
        deadline = time.monotonic() + 30
        while any(p["role"] == "draft" and p["state"] != "exited" for p in e.processes):
            assert time.monotonic() < deadline, e.processes
            time.sleep(0.05)
        assert sorted(p.name() for p in _children()) == ["specsched: verifier", "specsched: zygote"]
        assert outputs(e.generate(PROMPTS[:2], max_new_tokens=4)) == outputs(
            run_ok(sim_config(prompts=PROMPTS[:2], max_new_tokens=4)))
    assert _children() == []


def test_without_restarts_a_dead_worker_fails_its_job_keeps_its_tokens_and_the_engine_goes_on():
    with engine(sim_draft_ms=2, sim_verify_ms=4, max_restarts=0) as e:  # supervision: tests/test_supervisor.py
        job = e.submit(PROMPTS[:2], max_new_tokens=100_000)
        deadline = time.monotonic() + 60
        while not job.collected.tokens:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        victim = next(p for p in e.processes if p["name"] == "draft-1")
        psutil.Process(victim["pid"]).kill()
        record = job.result(timeout=60)
        assert record.status == "failed" and "draft-1 died more than 0 times" in record.error
        assert "draft-1 exited with status -9" in record.error
        assert sum(len(s.tokens) for s in record.sequences) > 0
        assert outputs(e.generate(PROMPTS[:2], max_new_tokens=6)) == outputs(
            run_ok(sim_config(prompts=PROMPTS[:2], max_new_tokens=6)))
    assert _children() == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_engine_whose_own_thread_broke_ends_its_jobs_and_says_why_to_later_submits(monkeypatch):
    """A bug in the engine's loop (injected here) must not hang a job's waiters, nor leave a later submit told
    'the engine is closed' by an engine nobody closed."""
    from specsched.runtime.engine.supervisor import Supervisor

    armed = threading.Event()  # set once the job is submitted: the loop breaks with the job in it

    def reap_breaks(self):
        if armed.is_set():
            raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(Supervisor, "reap", reap_breaks)
    with engine() as e:
        job = e.submit(PROMPTS[:2], max_new_tokens=4)
        armed.set()
        record = job.result(timeout=60)
        assert record.status == "failed" and record.error == "engine failure: RuntimeError: a bug in the loop"
        assert e.broken == record.error
        with pytest.raises(RuntimeError, match="engine failure: RuntimeError: a bug in the loop"):
            e.submit(PROMPTS[:2], max_new_tokens=4)
    assert _children() == []


def test_a_job_cannot_change_the_engines_models():
    with engine() as e, pytest.raises(ConfigError, match="sim_agreement"):
        e.submit(PROMPTS, sim_agreement=0.1)


def test_a_view_that_raises_is_dropped_and_the_job_goes_on():
    def broken_view(collected):
        raise SystemExit("the view gave up")

    with engine(sim_draft_ms=2, sim_verify_ms=4) as e:
        record = e.generate(PROMPTS[:2], max_new_tokens=300, on_update=broken_view)  # long enough for a tick
        assert record.status == "ok" and record.extra["engine"]["view_error"] == "SystemExit: the view gave up"
        assert e.generate(PROMPTS[:1], workers=1, max_new_tokens=4).status == "ok"  # the engine's thread lives


def test_the_views_last_frame_shows_the_processes_as_the_job_left_them():
    # workers that draft most of the time (30 ms a draft, 1 ms a verification): the view's last tick before the
    # end most likely saw them drafting; once the job is over, none is
    shown = []
    with engine(sim_draft_ms=30, sim_verify_ms=1) as e:
        record = e.generate(PROMPTS[:2], max_new_tokens=40, k=4, on_update=lambda c: shown.append(dict(c.states)))
    assert record.status == "ok" and len(shown) > 1        # long enough for a tick
    assert set(record.collected.states) == {"verifier", "draft-0", "draft-1"}
    assert "drafting" not in record.collected.states.values(), record.collected.states


def test_an_engine_whose_thread_cannot_start_says_why_instead_of_hanging(monkeypatch):
    """A temporary folder it cannot make (a full disk, say): Engine() raises the cause and leaves no child."""
    import tempfile

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="No space left on device"):
        Engine(sim_config())
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()


# A value a child would choke on (msgpack, numpy, range(), int()) or quietly misread: each is one ConfigError
# naming the field and the value, when the RunConfig is made.
@pytest.mark.parametrize("field, value, message", [
    ("k", "3", r"k must be an int, got '3' \(str\)"),
    ("workers", 2.0, r"workers must be an int, got 2.0 \(float\)"),        # range() in submit
    ("max_new_tokens", True, r"max_new_tokens must be an int, got True \(bool\)"),
    ("seed", np.int64(3), r"seed must be an int, got .*\(numpy.int64\)"),  # msgpack cannot pack it
    ("temperature", None, "temperature must be a number, got None"),
    ("lockstep", "no", "lockstep must be True or False, got 'no'"),         # was taken as True
    ("prompts", "lo mi", r"prompts must be a list of str, got 'lo mi' \(str\)"),  # was read as 5 prompts
    ("prompts", ["lo", 1], "prompts must be a list of str"),
    ("k_config", [1.5], "k_config must be a list of ints"),
    ("policy", None, "policy must be a str, got None"),
    ("device", None, "device must be a str, got None"),
    ("priorities", [10**30], "--priorities must be an integer in -2\\*\\*63..2\\*\\*63-1"),  # the engine's thread died
    ("tickets", [2**63], r"--tickets needs 1 or 3 values, each in 1..2\*\*63-1"),
    ("sim_draft_ms", 1e30, r"--sim-draft-ms must be in \[0, 60,000\] ms"),  # sleep() overflowed in each worker
    ("workers", 10**7, "a job has at most 10,000 sequences"),              # submit encoded 10**7 prompts
    ("keys", "", "--keys is empty"),                                        # was read as no keys
])
def test_a_run_config_refuses_a_bad_value_in_one_line_naming_it(field, value, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.of(backend="sim", **{field: value})


def test_bad_job_options_are_refused_by_submit_before_any_process_and_the_engine_goes_on():
    refused = [
        (dict(priority="high"), "priority must be an integer .* got 'high' \\(str\\)"),  # killed the verifier
        (dict(priority=1.5), "priority must be an integer"),                            # was truncated to 1
        (dict(priority=10**30), "priority must be an integer"),                         # the engine's thread died
        (dict(deadline_s="5"), "deadline_s must be seconds > 0 .* got '5'"),             # the engine's thread died
        (dict(deadline_s=math.nan), "deadline_s must be seconds > 0"),
        (dict(deadline_s=-1), "deadline_s must be seconds > 0"),
        (dict(name=5), "name must be a str, got 5 \\(int\\)"),
        (dict(on_update=5), "on_update must be callable"),                              # was dropped in silence
        (dict(config="x"), "config must be a RunConfig, got 'x' \\(str\\)"),
        (dict(prompts={"lo": 1}), "prompts must be a str or a list of str, got {'lo': 1} \\(dict\\)"),
        (dict(prompts=b"lo mi"), "prompts must be a str or a list of str"),
        (dict(foo=1), "unknown job setting 'foo'"),
        (dict(k=np.int64(3)), "k must be an int"),                                      # the engine's thread died
    ]
    with engine() as e:
        loaded = e.models_loaded
        for kwargs, message in refused:
            with pytest.raises(ConfigError, match=message):
                e.submit(**{"prompts": PROMPTS[:1], "workers": 1, **kwargs})
        assert e.models_loaded == loaded and e.broken is None
        job = e.submit(PROMPTS[:1], workers=1, max_new_tokens=4, priority=-2, deadline_s=1.5, name="fine")
        with pytest.raises(ValueError, match="timeout must be seconds >= 0 or None, got -1"):
            job.result(timeout=-1)
        with pytest.raises(ValueError, match="got nan"):
            job.result(timeout=math.nan)  # waited forever
        with pytest.raises(TypeError, match="timeout must be seconds or None, got '1'"):
            job.result(timeout="1")
        assert job.result(timeout=60).status == "ok"


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_workers="3"), "max_workers must be an int >= 0, got '3' \\(str\\)"),
    (dict(idle_timeout_s=math.nan), "idle_timeout_s must be seconds >= 0"),  # workers never retired
    (dict(idle_timeout_s=None), "idle_timeout_s must be seconds >= 0"),      # the engine's thread died later
    (dict(refuse_overlong="no"), "refuse_overlong must be True or False"),
    (dict(planned=[("late", "cfg")]), "planned must be a list of \\(name, RunConfig\\) pairs"),
    (dict(planned=[("late", sim_config(workers=65))]), "late: the job needs 65 draft workers"),
    (dict(config="x"), "config must be a RunConfig, got 'x'"),
    (dict(foo=1), "unknown engine setting 'foo'"),
])
def test_bad_engine_keywords_are_refused_before_any_process(kwargs, message):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigError, match=message):
        Engine(**{"config": sim_config(), **kwargs})
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()


def test_a_planned_job_whose_policy_does_not_load_is_named():
    from specsched.policies import PolicyError

    with pytest.raises(PolicyError, match="late: unknown policy 'nosuch'"):
        Engine(sim_config(), planned=[("late", sim_config(policy="nosuch"))])


def test_a_planned_job_without_prompts_is_checked_with_the_default_prompt():
    with Engine(sim_config(), planned=[("plain", sim_config(max_new_tokens=8))]) as e:  # was an IndexError
        assert e.generate(PROMPTS[:1], workers=1, max_new_tokens=4).status == "ok"


def test_run_refuses_a_config_that_is_no_run_config():
    with pytest.raises(ConfigError, match="config must be a RunConfig, got {'backend': 'sim'} \\(dict\\)"):
        run({"backend": "sim"})
