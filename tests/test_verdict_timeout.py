"""Nothing waits forever for a verdict: a worker that waits --verdict-timeout probes the verifier
(runtime/core/resume.py) and waits on (its draft is queued), sends the draft again (it was lost on the
way) or drafts on from the committed context (the verdict was lost). The text is the undisturbed run's."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from helpers import sim_config, words
from loopback_decode import NoTelemetry, decode_in_process

from specsched.runtime.backends.backend import get_backend
from specsched.runtime.core.config import ConfigError
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.resume import Resume
from specsched.runtime.core.wire import unpack
from specsched.runtime.engine.engine import Engine
from specsched.scheduler.jobs import JobState
from specsched.scheduler.resume import resume
from specsched.scheduler.verifier import Verifier
from specsched.workers.draft_worker import DraftWorker

PROMPT = [5, 7, 9]


class LossySocket:
    """A worker's DEALER to an in-process Verifier that loses what the test says: the draft of a round
    (`lose_draft`), the verdict on a round (`lose_verdict`), or holds a round's verdict back for `hold_s`."""

    def __init__(self, verifier: Verifier, *, lose_draft=(), lose_verdict=(), hold: dict | None = None) -> None:
        self.verifier, self.lose_draft, self.lose_verdict = verifier, set(lose_draft), set(lose_verdict)
        self.hold = dict(hold or {})          # round -> seconds its verdict is held back (queued meanwhile)
        self.inbox: list[list[bytes]] = []
        self.held: tuple[float, int] | None = None
        self.drafts: list[int] = []           # rounds of the drafts that arrived, in order
        self.probes: list[int] = []

    def send_multipart(self, frames, copy=True) -> None:
        msg = unpack([bytes(f) for f in frames])
        if msg.kind == "resume":
            r = Resume.from_message(msg)
            self.probes.append(r.probe)
            self.inbox.append([bytes(f) for f in resume(self.verifier, r, b"w0").to_frames()])
            return
        draft = Draft.from_message(msg)
        if draft.round in self.lose_draft:
            self.lose_draft.discard(draft.round)
            return
        self.drafts.append(draft.round)
        self.verifier.admit(draft, b"w0", time.monotonic())
        if draft.round in self.hold:
            self.held = (time.monotonic() + self.hold.pop(draft.round), draft.round)
            return
        self._verify(draft.round)

    def _verify(self, rnd: int) -> None:
        (reply,) = self.verifier.verify(self.verifier.queue.pick())
        if rnd in self.lose_verdict:
            self.lose_verdict.discard(rnd)
        else:
            self.inbox.append([bytes(f) for f in reply.verdict.to_frames()])
        self.verifier.close_finished_jobs()

    def poll(self, timeout=None) -> bool:
        if self.held is not None and time.monotonic() >= self.held[0]:
            self._verify(self.held[1])
            self.held = None
        if not self.inbox:
            time.sleep(0.005)
        return bool(self.inbox)

    def recv_multipart(self, copy=True) -> list[bytes]:
        return self.inbox.pop(0)


def decode_lossy(config, **losses) -> tuple[list[int], LossySocket]:
    config = config.replace(mode="sd", workers=1, prompts=[], sim_draft_ms=0.0, sim_verify_ms=0.0)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), NoTelemetry())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[0, 0, 0, list(PROMPT)]]}, verifier.target))
    st = verifier.seqs[0]
    sock = LossySocket(verifier, **losses)
    DraftWorker(backend.draft(), 0, sock, NoTelemetry()).run_sequence(config, 0, 0, list(PROMPT))
    return st.generated, sock


CONFIG = sim_config(sim_vocab=32, max_new_tokens=40, verdict_timeout_s=0.05)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_lost_draft_is_sent_again_and_a_lost_verdict_is_taken_up_from_the_committed_context(temperature):
    config = CONFIG.replace(temperature=temperature, seed=4)
    undisturbed = decode_in_process(config, PROMPT, 0)
    text, sock = decode_lossy(config, lose_draft={1}, lose_verdict={3})
    assert text == undisturbed
    assert sock.drafts[:2] == [0, 1]          # round 1's draft arrived once: the second sending
    assert sock.probes.count(1) >= 1 and sock.probes.count(3) >= 1
    assert sock.verifier.counters.rejected_messages == 0   # nothing sent twice into the queue


def test_a_draft_held_back_is_waited_for_not_sent_again():
    text, sock = decode_lossy(CONFIG, hold={2: 0.4})
    assert text == decode_in_process(CONFIG, PROMPT, 0)
    assert sock.probes.count(2) >= 3          # asked every 50 ms; each answer said queued
    assert sock.drafts.count(2) == 1
    assert sock.verifier.counters.rejected_messages == 0


def test_a_lost_last_verdict_ends_the_sequence_after_its_job_closed():
    config = replace(CONFIG, max_new_tokens=6)
    undisturbed = decode_in_process(config, PROMPT, 0)
    rounds = len(decode_lossy(config)[1].drafts)
    text, sock = decode_lossy(config, lose_verdict={rounds - 1})
    assert text == undisturbed and sock.probes == [rounds - 1]


def test_the_verdict_timeout_is_checked():
    with pytest.raises(ConfigError, match="--verdict-timeout must be in"):
        sim_config(verdict_timeout_s=0)


def test_probes_every_few_milliseconds_change_nothing_in_a_real_run():
    """Real processes and sockets: workers probe far more often than a verification takes (1 ms against
    10 ms), so probes and their stale answers cross verdicts all the time; the text is the same."""
    prompts = [words(16, (5, 7)), words(16, (3, 9)), words(16, (2, 4))]
    settings = dict(max_new_tokens=60, temperature=0.9, seed=5, policy="priority", priorities=[3, 1, 2])
    with Engine(sim_config(sim_vocab=16, sim_draft_ms=2, sim_verify_ms=10, workers=3)) as e:
        undisturbed = e.generate(prompts, **settings)
        probed = e.generate(prompts, verdict_timeout_s=0.001, **settings)
    assert probed.status == "ok", probed.error
    assert [s.tokens for s in probed.sequences] == [s.tokens for s in undisturbed.sequences]
    assert probed.metrics.rejected_messages == 0


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_beam_workers_probing_every_few_milliseconds_change_nothing(threshold):
    """dsbd, fixed and dynamic width: a beam worker waiting for its next task probes too (a `beam_resume`
    marked with its round, answered only if its task or tree was lost); the beams are the same."""
    prompts = [words(16, (5, 7)), words(16, (3, 9))]
    settings = dict(mode="dsbd", beams=3, beam_threshold=threshold, max_new_tokens=30, temperature=0.8, seed=5)
    with Engine(sim_config(sim_vocab=16, sim_draft_ms=2, sim_verify_ms=10)) as e:
        undisturbed = e.generate(prompts, **settings)
        probed = e.generate(prompts, verdict_timeout_s=0.001, **settings)
    assert probed.status == "ok", probed.error
    assert [s.tokens for s in probed.sequences] == [s.tokens for s in undisturbed.sequences]
    assert probed.to_json()["beams"] == undisturbed.to_json()["beams"]
    assert probed.metrics.rejected_messages == 0


def test_probes_while_a_sequence_rides_aside_wait_for_its_held_verdict():
    """--step-aside on: a sequence whose drafting does not pay is decoded by the target alone for a while, its
    worker's verdict held meanwhile (scheduler/step_aside.py). A probe then says queued, and the worker waits:
    it must not draft on from the committed context while the held verdict is still to come."""
    prompts = [words(16, (5, 7)), words(16, (3, 9))]
    settings = dict(max_new_tokens=80, temperature=0.9, seed=5, step_aside="on")
    config = sim_config(sim_vocab=16, sim_agreement=0.2, sim_draft_ms=15, sim_verify_ms=5, workers=2)
    with Engine(config) as e:
        undisturbed = e.generate(prompts, coupling="gumbel", **settings)
        probed = e.generate(prompts, coupling="gumbel", verdict_timeout_s=0.001, **settings)
    assert probed.status == "ok", probed.error
    assert probed.to_json()["counters"]["aside_tokens"] > 0  # sequences rode aside while their workers probed
    assert [s.tokens for s in probed.sequences] == [s.tokens for s in undisturbed.sequences]
    assert probed.metrics.rejected_messages == 0


def test_a_probe_about_a_sequence_the_verifier_does_not_hold_is_answered_only_once_it_was_closed_here():
    """A new verifier (restarted) may hear a probe before the engine announces the job again: no answer (the
    engine's resync moves the worker on); a sequence whose job ended here is done."""
    from specsched.runtime.core.transport import worker_identity

    config = CONFIG.replace(mode="sd", workers=1, prompts=[], sim_draft_ms=0.0, sim_verify_ms=0.0, max_new_tokens=4)
    verifier = Verifier(get_backend(config).target(), NoTelemetry())
    assert resume(verifier, Resume(0, 0, 0, probe=2), worker_identity(0)) is None
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[0, 0, 0, list(PROMPT)]]}, verifier.target))
    verifier.finish_job(verifier.jobs[0])
    answer = resume(verifier, Resume(0, 0, 0, probe=2), worker_identity(0))
    assert answer.done and answer.probe == 2
