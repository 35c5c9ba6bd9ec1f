"""No child process outlives a run: after a normal run, a failing run, Ctrl-C (SIGINT), SIGTERM and
even SIGKILL of the CLI. An interrupted run exits non-zero and still reports every token it had
verified.

Each test starts the real CLI, records every descendant it ever has (psutil) while it runs, and
checks after it exits that none of them is still running.
"""

from __future__ import annotations

import _thread
import os
import signal
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
from cli_runs import read_json, specsched, stderr_lines
from helpers import draft_model, greedy_reference, run_ok, sim_config, words
from process_watch import Watched

from specsched.runtime.apps.run.app import run
from specsched.runtime.core.config import ConfigError
from specsched.runtime.core.transport import SUN_PATH_MAX, private_dir
from specsched.runtime.engine.engine import Engine
from specsched.runtime.engine.stopping import STOPPING_LINE

VOCAB = 64
# Greedy decoding from these prompts never reaches EOS: the run goes on until it is stopped.
ENDLESS = [(5, 7), (3, 9), (11, 13)]
ENDLESS_ARGS = [a for p in ENDLESS for a in ("--prompt", words(VOCAB, p))]
K = 3
LONG_RUN = [*ENDLESS_ARGS, "--max-new-tokens", "1000000", "--k", str(K), "--sim-draft-ms", "3",
            "--sim-verify-ms", "15"]


def tokens_after_each_verification(prompt: tuple[int, ...], verifications: int) -> list[int]:
    """A sequence's committed length after 0, 1, ... ``verifications`` verifications of LONG_RUN.

    Greedy chains of K: a verification keeps the draft's argmax tokens up to the first one that is
    not the target's argmax, then adds the target's own token (1 to K + 1 tokens).
    """
    target_tokens = greedy_reference(prompt, VOCAB, (K + 1) * verifications)
    draft = draft_model(VOCAB, sim_config().sim.agreement)
    ends = [0]
    for _ in range(verifications):
        done, accepted = ends[-1], 0
        context = [*prompt, *target_tokens[:done]]
        while accepted < K and int(draft.logits_for(context).argmax()) == target_tokens[done + accepted]:
            context.append(target_tokens[done + accepted])
            accepted += 1
        ends.append(done + accepted + 1)
    return ends


def no_children_of_this_process() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def test_a_normal_run_leaves_no_process_behind():
    w = Watched(*ENDLESS_ARGS, "--max-new-tokens", "40", "--sim-draft-ms", "2", "--sim-verify-ms", "5")
    w.watch_until_exit()
    code, _, err = w.finish()
    assert code == 0, err
    assert len(w.seen) == 2 + len(ENDLESS)   # the zygote, the verifier and one draft worker per prompt
    assert w.survivors() == []


LATE_FAILURE = textwrap.dedent("""
    from specsched.policies import Policy

    class Late(Policy):
        name = "{name}"
        calls = 0

        def pick(self, ready):
            self.calls += 1
            if self.calls > 20:   # fail mid-run, once every process is up and busy
                {how}
            return ready[0]
""")


@pytest.mark.parametrize("name, how, flags, error", [
    ("late-failure", "raise RuntimeError('gave up')", [], "policy 'late-failure' raised RuntimeError: gave up"),
    # heartbeats come from a thread, so a verifier stuck in a plug-in's loop still beats: the deadline on
    # policy code (--policy-timeout) stops it
    ("stuck", "while True: pass", ["--policy-timeout", "0.5"],
     "policy 'stuck': pick did not return within 0.5 s (--policy-timeout), so it was stopped"),
], ids=["raises", "never returns"])
def test_a_policy_failing_mid_run_ends_it_in_one_line_and_leaves_no_process_behind(tmp_path, name, how, flags, error):
    policy = tmp_path / "late.py"
    policy.write_text(LATE_FAILURE.format(name=name, how=how))
    w = Watched(*LONG_RUN, "--policy", f"{policy}:Late", *flags)
    w.watch_until_exit()
    code, _, err = w.finish()
    assert code == 1
    assert stderr_lines(err) == [f"specsched: error: verifier: PolicyFailure: {error}"]
    assert len(w.seen) == 2 + len(ENDLESS)  # the zygote, the verifier, a worker per prompt
    assert w.survivors() == []


def test_a_policy_asleep_in_pick_fails_its_job_and_the_verified_tokens_are_kept(tmp_path):
    policy = tmp_path / "asleep.py"
    policy.write_text(textwrap.dedent("""
        import time
        from specsched.policies import Policy

        class Asleep(Policy):
            name = "asleep"
            calls = 0

            def pick(self, ready):
                self.calls += 1
                if self.calls > 6:
                    try:
                        time.sleep(3600)
                    except Exception:   # a policy's own handler does not swallow the deadline
                        pass
                return ready[0]
    """))
    started = time.monotonic()
    record = run(sim_config(workers=2, max_new_tokens=1000, policy=f"{policy}:Asleep", policy_timeout_s=0.5))
    assert time.monotonic() - started < 60
    assert record.status == "failed" and "'asleep': pick did not return within 0.5 s" in record.error
    assert sum(len(s.tokens) for s in record.sequences) >= 6   # six verifications, each commits a token or more


def test_a_run_started_under_a_deep_tmpdir_puts_its_sockets_where_a_unix_socket_path_fits(tmp_path, monkeypatch):
    """A Unix socket's path holds 107 bytes: under a deep TMPDIR the run (lanes as processes too) failed with
    "File name too long"; now its private directory moves to /tmp."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    result = specsched("run", "--backend", "sim", "--prompt", "a b", "--max-new-tokens", "6", "--drafter", "branches",
                       "--branch-processes", "--no-live", "--quiet", env={**os.environ, "TMPDIR": str(deep)})
    assert result.returncode == 0, result.stderr
    assert list(deep.iterdir()) == []
    short = Path(tempfile.mkdtemp(dir="/tmp"))   # short whatever pytest's --basetemp
    try:
        for where, expected in ((deep, Path("/tmp")), (short, short)):
            monkeypatch.setattr(tempfile, "tempdir", str(where))
            made = private_dir("specsched-", "telemetry.sock")
            try:
                assert made.parent == expected and made.stat().st_mode & 0o777 == 0o700
                assert len(os.fsencode(made / "telemetry.sock")) <= SUN_PATH_MAX
            finally:
                made.rmdir()
    finally:
        short.rmdir()


def interrupt_mid_run(tmp_path, signum: int, attempts: int = 3, sigint_ignored: bool = False, then: int | None = None):
    """Start a long run, let it verify for a while, send ``signum`` (and ``then``, 50 ms later, while it
    stops); retry with a longer wait if the machine was so busy that nothing had been verified yet."""
    for attempt in range(attempts):
        out = tmp_path / f"record-{attempt}.json"
        with Watched(*LONG_RUN, "--json", str(out), sigint_ignored=sigint_ignored) as w:
            w.wait_for_children(1 + len(ENDLESS))
            deadline = time.monotonic() + 2.0 * 2 ** attempt
            while time.monotonic() < deadline:
                w.poll_children()
                time.sleep(0.05)
            w.signal(signum)
            if then is not None:
                time.sleep(0.05)
                w.signal(then)
            code, stdout, stderr = w.finish(timeout=60)
        assert w.survivors() == []
        record = read_json(out)
        if any(s["tokens"] for s in record["sequences"]) or attempt == attempts - 1:
            return code, stderr, record


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_exits_non_zero_keeps_what_was_verified_and_leaves_no_process(tmp_path, signum):
    code, stderr, record = interrupt_mid_run(tmp_path, signum)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum]  # README: 128 + the signal number
    lines = stderr_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("specsched: error: interrupted"), stderr
    assert "Traceback" not in stderr
    assert record["status"] == "interrupted"

    sequences = record["sequences"]
    assert any(s["tokens"] for s in sequences), "nothing was verified before the signal"
    for s, prompt in zip(sequences, ENDLESS):
        # what was kept is exactly what greedy decoding produces, up to where the run was stopped
        assert s["tokens"] == greedy_reference(prompt, VOCAB, len(s["tokens"]))
        assert s["finished"] is False
    assert record["metrics"]["tokens"] == sum(len(s["tokens"]) for s in sequences)

    # The verifier reports a verification's tokens before its event, on one ordered channel: every
    # verification in the record's timeline has its tokens in the record too, and besides them at most
    # one more (the stop cut the channel between that commit and its event).
    verifies = Counter(e["seq"] for e in record["events"] if e["role"] == "verifier" and e["kind"] == "verify")
    assert sum(verifies.values()) > 0
    cut = 0
    for seq, (s, prompt) in enumerate(zip(sequences, ENDLESS)):
        ends = tokens_after_each_verification(prompt, verifies[seq] + 1)
        assert len(s["tokens"]) in (ends[-2], ends[-1]), (seq, len(s["tokens"]), verifies[seq], ends[-3:])
        cut += len(s["tokens"]) == ends[-1]
    assert cut <= 1


@pytest.mark.parametrize("first, second", [
    (signal.SIGINT, signal.SIGINT),  # Ctrl-C twice
    pytest.param(signal.SIGTERM, signal.SIGINT, marks=pytest.mark.slow)], ids=["SIGINT-SIGINT", "SIGTERM-SIGINT"])
def test_a_second_signal_while_the_run_stops_loses_nothing(tmp_path, first, second):
    # a user pressing Ctrl-C twice, or `timeout`, which signals the CLI and its process group: the second
    # signal used to cut the teardown short, and every token verified was lost with the record
    code, stderr, record = interrupt_mid_run(tmp_path, first, then=second)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[first]
    lines = stderr_lines(stderr)
    assert lines[-1].startswith("specsched: error: interrupted") and "Traceback" not in stderr, stderr
    assert set(lines[:-1]) <= {STOPPING_LINE}  # said once, unless both signals came before the teardown
    assert record["status"] == "interrupted"
    assert any(s["tokens"] for s in record["sequences"]), "nothing was verified before the signal"


def test_ctrl_c_stops_a_run_started_with_sigint_ignored(tmp_path):
    # A shell without job control starts a background job with SIGINT ignored, and a child inherits
    # that: the CLI must still stop (and tear its children down) on SIGINT.
    code, stderr, record = interrupt_mid_run(tmp_path, signal.SIGINT, sigint_ignored=True)
    assert code == 130
    lines = stderr_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("specsched: error: interrupted"), stderr
    assert record["status"] == "interrupted"


def test_sigint_during_start_up_leaves_no_process_behind():
    with Watched(*LONG_RUN) as w:
        w.wait_for_children(1)  # the verifier is starting; the workers may not exist yet
        w.signal(signal.SIGINT)
        w.watch_until_exit()
        code, _, stderr = w.finish()
    assert code == 130
    assert "Traceback" not in stderr
    assert w.survivors() == []


def test_children_die_with_a_killed_cli():
    # SIGKILL leaves the CLI no chance to clean up: the children must notice and go by themselves.
    with Watched(*LONG_RUN) as w:
        w.wait_for_children(1 + len(ENDLESS))
        time.sleep(1.0)
        w.poll_children()
        w.signal(signal.SIGKILL)
        w.finish()
    assert w.proc.returncode == -signal.SIGKILL
    assert w.survivors(grace=15) == []


def test_in_process_runs_leave_no_child_of_the_caller(tmp_path):
    before = {p.pid for p in no_children_of_this_process()}
    run_ok(sim_config(workers=2, max_new_tokens=8))
    failing = tmp_path / "fails.py"
    failing.write_text("from specsched.policies import Policy\n"
                       "class Fails(Policy):\n"
                       "    name = 'fails'\n"
                       "    def pick(self, ready):\n"
                       "        raise KeyError('x')\n")
    record = run(sim_config(workers=2, max_new_tokens=8, policy=f"{failing}:Fails"))
    assert record.status == "failed" and "'fails'" in record.error
    assert {p.pid for p in no_children_of_this_process()} - before == set()


def test_input_refused_while_the_zygote_warms_up_is_one_error_and_leaves_no_process(tmp_path):
    """The engine starts its zygote before the checks that read files (here: a corpus cache that is not one);
    a refusal then stops it: the caller gets the error and keeps no child."""
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a corpus cache")
    before = {p.pid for p in no_children_of_this_process()}
    with pytest.raises(ConfigError, match="is not a corpus cache"):
        Engine(sim_config(drafter="branches", corpus_cache=str(junk)))
    assert {p.pid for p in no_children_of_this_process()} - before == set()


def test_ctrl_c_keeps_the_commits_the_verifier_had_already_sent(tmp_path):
    """Ctrl-C lands while the engine's thread is busy (say, drawing a live view) and the verifier keeps
    verifying: every commit it sent before it was stopped belongs in the record."""
    # fcfs that appends a byte to a file at every pick: the verifier's progress, seen from outside
    picks = tmp_path / "picks"
    picks.touch()
    policy = tmp_path / "counted.py"
    policy.write_text(textwrap.dedent(f"""
        from specsched.policies.fcfs import FCFS

        class Counted(FCFS):
            name = "counted"

            def pick(self, ready):
                with open({str(picks)!r}, "ab") as f:
                    f.write(b".")
                return super().pick(ready)
    """))
    seen = {}

    def on_update(collected):
        received = sum(len(t) for t in collected.tokens.values())
        if received and "before" not in seen:
            seen["before"] = received
            # The engine reads nothing while it is in here. Wait until the verifier has picked 5
            # more times: it sent the commits of at least 4 verifications that started after
            # `received` was counted, and then went on verifying.
            start = picks.stat().st_size
            deadline = time.monotonic() + 60
            while picks.stat().st_size < start + 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            seen["picks"] = picks.stat().st_size - start
            _thread.interrupt_main()  # Ctrl-C reaches the main thread, waiting for the record

    config = sim_config(prompts=[words(VOCAB, p) for p in ENDLESS], max_new_tokens=1_000_000, k=K,
                        sim_draft_ms=3.0, sim_verify_ms=15.0, policy=f"{policy}:Counted")
    # interrupt_main only raises where Python handles SIGINT: a suite started as a background job of a
    # script (`pytest &`) inherits SIGINT ignored, and this run would then never end
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        record = run(config, on_update=on_update)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen["picks"] >= 5, "the verifier made no progress in 60 s"
    assert record.status == "interrupted"
    for s, prompt in zip(record.sequences, ENDLESS):
        assert s.tokens == greedy_reference(prompt, VOCAB, len(s.tokens))
    assert record.metrics.tokens > seen["before"]
