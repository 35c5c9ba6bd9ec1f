"""The seam a scheduling policy plugs into: what the run queue tells a policy about each ready draft,
what it takes back (a draft it handed over, or up to max_batch of them; anything else, or an exception,
is a PolicyFailure naming the policy), and loading a policy by name, module:class or file:class (a spec
that cannot be loaded is a PolicyError)."""

from __future__ import annotations

import signal
import textwrap
import threading
import time

import pytest
from policy_drafts import drain, queue_with, ready

from specsched.policies import Policy, PolicyError, PolicySettings, ReadyDraft, load_policy
from specsched.policies.batch import Batch
from specsched.policies.fcfs import FCFS
from specsched.policies.priority import Priority
from specsched.policies.rr import RoundRobin
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.deadline import Overrun, deadline
from specsched.runtime.core.messages import Draft
from specsched.scheduler.run_queue import PolicyFailure, RunQueue, start_policy

# -- the run queue ----------------------------------------------------------------------------------

def test_run_queue_describes_each_draft_to_the_policy():
    seen: list[list[ReadyDraft]] = []

    class Spy(Policy):
        name = "spy"

        def pick(self, ready_drafts):
            seen.append(list(ready_drafts))
            return ready_drafts[-1]

    q = RunQueue(Spy())
    q.push(Draft.chain(4, 1, 2, [7, 8, 9]), b"w1", arrival=10.0, verified_tokens=12, priority=3, round=2)
    q.push(Draft.chain(5, 2, 0, [7]), b"w2", arrival=11.0, verified_tokens=0, priority=1, round=0)
    (entry,) = q.pick()
    assert entry.reply_to == b"w2" and entry.draft.seq == 5
    assert seen[0] == [
        ReadyDraft(worker=1, seq=4, arrival=10.0, order=0, length=3, verified_tokens=12, priority=3, round=2),
        ReadyDraft(worker=2, seq=5, arrival=11.0, order=1, length=1, verified_tokens=0, priority=1, round=0),
    ]
    assert len(q) == 1
    (entry,) = q.pick()
    assert entry.draft.seq == 4 and len(q) == 0


class _Bad(Policy):
    """Returns whatever the test puts in ``answer`` (or raises it)."""

    name = "bad-policy"

    def __init__(self, answer, settings=None):
        super().__init__(settings)
        self.answer = answer

    def pick(self, ready_drafts):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer(ready_drafts) if callable(self.answer) else self.answer


@pytest.mark.parametrize("answer, message", [
    (RuntimeError("scheduler exploded"), "raised RuntimeError: scheduler exploded"),
    (SystemExit(3), "raised SystemExit: 3"),                                # must not end the verifier
    (42, "returned 42 (int), which is not one of the ready drafts: pick must return a ReadyDraft"),
    ({"w0"}, "returned {'w0'} (set)"),
    (None, "not one of the ready drafts"),
    ([], "not one of the ready drafts"),
    ("w0", "not one of the ready drafts"),
    (lambda r: ready(9, 0.0, 99), "not one of the ready drafts"),        # a draft that is not queued
    (lambda r: ready(r[0].worker, r[0].arrival + 1, r[0].order), "not one of the ready drafts"),  # forged
    (lambda r: [r[0], r[0]], "picked"),                                     # twice (and over max_batch)
    (lambda r: list(r), "picked 2 drafts"),                                 # batch larger than allowed
])
def test_a_policy_that_raises_or_returns_something_else_is_a_policy_failure_naming_it(answer, message):
    q = queue_with(_Bad(answer), [(0, 1.0, 0), (1, 2.0, 0)])
    with pytest.raises(PolicyFailure, match="bad-policy") as info:
        q.pick()
    assert message in str(info.value)
    assert len(q) == 2  # nothing was taken out of the queue


# SIGALRM's handler before any deadline: SIG_DFL, or SIG_IGN where the suite inherited it ignored (as it does
# `trap '' ALRM`); a deadline puts back whatever was there
ALARM_BEFORE = signal.getsignal(signal.SIGALRM)


def assert_no_alarm_left() -> None:
    assert signal.getsignal(signal.SIGALRM) is ALARM_BEFORE and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def _forever(ready_drafts):
    while True:   # a plug-in's loop that never returns
        pass


@pytest.mark.parametrize("answer", [_forever, lambda r: time.sleep(3600)], ids=["busy loop", "sleep"])
def test_a_pick_that_does_not_return_within_the_policy_timeout_is_stopped_and_named(answer):
    q = RunQueue(_Bad(answer), timeout_s=0.2)
    for worker in (0, 1):
        q.push(Draft.chain(worker, worker, 0, [7]), b"w", arrival=1.0, verified_tokens=0, priority=0, round=0)
    started = time.monotonic()
    with pytest.raises(PolicyFailure, match=r"'bad-policy': pick did not return within 0.2 s \(--policy-timeout\)"):
        q.pick()
    assert time.monotonic() - started < 30 and len(q) == 2
    assert_no_alarm_left()
    q.policy.answer = lambda r: r[1]   # the queue goes on with a policy that answers
    assert [e.draft.worker for e in q.pick()] == [1]


def test_the_deadline_lets_a_quick_policy_through_and_stops_a_slow_served_or_constructor(tmp_path):
    q = queue_with(_Bad(lambda r: r[0]), [(0, 1.0, 0)])
    q.timeout_s = 0.2
    picked = q.pick()
    q.policy.served = lambda *a: time.sleep(3600)
    with pytest.raises(PolicyFailure, match="served did not return within 0.2 s"):
        q.served(picked, 0.01, [1])
    (tmp_path / "slow_start.py").write_text(textwrap.dedent("""
        import time
        from specsched.policies import Policy

        class SlowStart(Policy):
            def __init__(self, settings=None):
                super().__init__(settings)
                time.sleep(3600)

            def pick(self, ready):
                return ready[0]
    """))
    config = RunConfig.of(backend="sim", policy=f"{tmp_path}/slow_start.py:SlowStart", policy_timeout_s=0.2)
    with pytest.raises(PolicyFailure, match="'SlowStart': __init__ did not return within 0.2 s"):
        start_policy(config)


HANGS_AT_IMPORT = """
import time
try:
    time.sleep(3600)       # user code run at import: a model download, a lock, a loop
except Exception:          # its own handler does not swallow the deadline
    pass
from specsched.policies import Policy

class Never(Policy):
    def pick(self, ready):
        return ready[0]
"""


def test_a_policy_module_whose_import_does_not_return_is_stopped_in_one_line(tmp_path):
    from cli_runs import assert_one_error_line, specsched

    (tmp_path / "hangs.py").write_text(HANGS_AT_IMPORT)
    spec = f"{tmp_path}/hangs.py:Never"
    started = time.monotonic()
    with pytest.raises(PolicyError, match=r"^policy '.*hangs.py:Never': its import did not return within 0.3 s "
                                          r"\(--policy-timeout\), so it was stopped$"):
        load_policy(spec, 0.3)
    assert time.monotonic() - started < 30
    assert_no_alarm_left()
    out = specsched("run", "--backend", "sim", "--prompt", "x", "--policy", spec, "--policy-timeout", "0.5",
                    timeout=120)
    assert_one_error_line(out, 2, "its import did not return within 0.5 s (--policy-timeout)")


def test_the_deadline_is_a_no_op_off_the_main_thread():
    q = queue_with(_Bad(lambda r: time.sleep(0.4) or r[0]), [(0, 1.0, 0)])
    q.timeout_s = 0.1
    picked = []
    worker = threading.Thread(target=lambda: picked.extend(q.pick()))
    worker.start()
    worker.join()
    assert len(picked) == 1   # a signal handler runs only in the main thread: no deadline there


def test_a_deadline_keeps_an_enclosing_timer_and_a_nested_one_keeps_the_outer_deadline():
    """One real-time timer a process: a pick's deadline had cancelled a caller's alarm (whatif, teach and the
    API run policies in the caller's process), and a deadline inside another ended the outer one."""
    fired = []

    def caller(signum, frame):
        fired.append("caller")

    before = signal.signal(signal.SIGALRM, caller)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        q = queue_with(_Bad(lambda r: r[0]), [(0, 1.0, 0)])
        q.timeout_s = 5
        q.pick()
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0 < left <= 30 and signal.getsignal(signal.SIGALRM) is caller   # the caller's alarm runs on
        signal.setitimer(signal.ITIMER_REAL, 0.2)   # due while a slow pick runs: its handler fires on time
        q = queue_with(_Bad(lambda r: time.sleep(1) or r[0]), [(0, 1.0, 0)])
        q.timeout_s = 20
        q.pick()
        assert fired == ["caller"]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    started = time.monotonic()
    with pytest.raises(Overrun):
        with deadline(0.5):
            with deadline(10):
                pass
            time.sleep(30)
    assert time.monotonic() - started < 20
    assert_no_alarm_left()


def test_a_batching_policy_may_pick_several_drafts_up_to_max_batch():
    q = queue_with(_Bad(lambda r: [r[2], r[0]], PolicySettings(max_batch=2)), [(0, 1.0, 0), (1, 2.0, 0), (2, 3.0, 0)])
    assert [e.draft.worker for e in q.pick()] == [2, 0]
    assert len(q) == 1


# -- loading ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, cls", [("fcfs", FCFS), ("priority", Priority), ("rr", RoundRobin), ("batch", Batch)])
def test_builtin_names_load_their_policy(name, cls):
    assert load_policy(name) is cls
    assert cls.name == name


def test_module_colon_class_loads_a_policy():
    assert load_policy("specsched.policies.rr:RoundRobin") is RoundRobin


def test_file_colon_class_loads_a_policy(tmp_path):
    path = tmp_path / "newest.py"
    path.write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Newest(Policy):
            name = "newest"
            def pick(self, ready):
                return max(ready, key=lambda d: d.order)
    """))
    cls = load_policy(f"{path}:Newest")
    assert drain(cls(), [ready(0, 1.0, 0), ready(1, 2.0, 1), ready(2, 3.0, 2)]) == [2, 1, 0]


@pytest.mark.parametrize("spec, message", [
    ("lotto", "unknown policy 'lotto'"),
    ("{tmp}/missing.py:X", "policy file not found"),
    ("{tmp}/p.py:Missing", "policy class 'Missing' not found"),
    ("{tmp}/p.py:NotAPolicy", "is not a subclass"),
    ("{tmp}/p.py:Abstract", "does not implement pick()"),
    ("{tmp}/broken.py:X", "failed to import"),
    ("{tmp}/exits.py:X", "exits.py failed to import: SystemExit: 5"),
    ("no_such_module_xyz:X", "cannot import policy module"),
    ("..relative:X", "policy module '..relative' failed to import: TypeError"),
    (":X", "the module part before ':' is empty"),
    ("{tmp}/p.py:", "the class name after ':' is empty"),
])
def test_bad_policy_specs_raise_policy_error(tmp_path, spec, message):
    (tmp_path / "p.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy
        class NotAPolicy:
            def pick(self, ready):
                return ready[0]
        class Abstract(Policy):
            pass
    """))
    (tmp_path / "broken.py").write_text("raise ImportError('nope')\n")
    (tmp_path / "exits.py").write_text("raise SystemExit(5)\n")
    with pytest.raises(PolicyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_policy(spec.format(tmp=tmp_path))


SWALLOWS = """
import time
from specsched.policies import Policy

class Swallows(Policy):
    def pick(self, ready):
        while True:
            try:
                time.sleep(3600)
            except BaseException:   # the deadline's stop too: it never returns
                pass
"""


def test_a_pick_that_swallows_the_deadlines_stop_ends_its_run_in_one_line_not_a_hang(tmp_path):
    """A bare except (or except BaseException) catches the deadline's Overrun; one grace period later the
    verifier fails the policy's jobs in one line and exits, and the run ends with status failed."""
    from cli_runs import specsched

    (tmp_path / "swallows.py").write_text(SWALLOWS)
    started = time.monotonic()
    out = specsched("run", "--backend", "sim", "--prompt", "x", "--policy", f"{tmp_path}/swallows.py:Swallows",
                    "--policy-timeout", "0.5", "--quiet", timeout=120)
    assert time.monotonic() - started < 100
    assert out.returncode != 0
    assert "swallowed the stop" in out.stderr, out.stderr[-2000:]
