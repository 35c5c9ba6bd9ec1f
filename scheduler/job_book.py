"""The verifier's book of work: its jobs and their sequences, the run queue and the riders, admitted and
forgotten; drafts checked and queued; rejected messages counted; and what a finished or failed job tells
the engine. ``Verifier`` holds one, and so do the owners of its step's phases (verifier.py).
"""

from __future__ import annotations

import sys

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.calibration import Calibration
from ..runtime.core.config import DrafterKind
from ..runtime.core.costs import CostFit
from ..runtime.core.messages import Draft
from ..runtime.core.transport import Telemetry, check_sender
from ..runtime.core.wire import ProtocolError
from .beam_rounds import BeamRounds
from .cores import Cores
from .jobs import Counters, JobState, SequenceState
from .run_queue import RunQueue, scheduling_key, start_policy
from .step_aside import Rider, StepAside


class JobBook:
    """Everything the verifier holds of its work; reads the target's vocabulary, the cost fit and the cores
    (for what a finished job reports), and tells the engine through `telemetry`."""

    def __init__(self, target: LanguageModel, telemetry: Telemetry, costs: CostFit, cores: Cores) -> None:
        self.target, self.telemetry, self.costs, self.cores = target, telemetry, costs, cores
        self.jobs: dict[int, JobState] = {}
        self.seqs: dict[int, SequenceState] = {}
        self.beam_rounds = BeamRounds(target)  # beam sequences (beam_steps.py)
        self.queue: RunQueue | None = None    # the speculative jobs' run queue, under their policy
        self.key: tuple | None = None         # the scheduling that queue runs (run_queue.scheduling_key)
        self.riders: dict[int, Rider] = {}    # sequences decoded alone for now, by global id (step_aside.py)
        self.aside = StepAside()
        self.closed: set[int] = set()         # sequences of jobs finished or cancelled here (resume.py)
        self.calibrations: dict[int, Calibration] = {}  # per job: acceptance by draft confidence
        self.counters = Counters()            # over the verifier's life; each job keeps its own too
        self.rejected_unclaimed = 0           # rejected while no job ran: counted by the next job

    def add_job(self, job: JobState) -> None:
        if job.id in self.jobs or any(st.seq in self.seqs for st in job.sequences):
            raise ProtocolError(f"job {job.id} announced twice")
        if not job.target_only:
            key = scheduling_key(job.config)
            if self.key != key:
                if any(not j.target_only for j in self.jobs.values()):
                    raise ProtocolError(f"job {job.id} needs scheduling {key}, the running jobs {self.key}")
                self.queue, self.key = RunQueue(start_policy(job.config), job.config.supervision.policy_timeout_s), key
        job.rejected_before = self.counters.rejected_messages - self.rejected_unclaimed
        self.rejected_unclaimed = 0
        self.jobs[job.id] = job
        self.seqs.update((st.seq, st) for st in job.sequences)
        self.beam_rounds.add(job)

    def finish_job(self, job: JobState) -> None:
        """Forget a finished (or cancelled) job: its caches go, so memory does not grow with history."""
        job.counters.rejected_messages = self.counters.rejected_messages - job.rejected_before
        for st in job.sequences:
            self.seqs.pop(st.seq, None)
            self.closed.add(st.seq)
        del self.jobs[job.id]
        if self.queue is not None:
            self.queue.drop(lambda q: q.draft.seq not in self.seqs)
        for st in job.sequences:
            self.riders.pop(st.seq, None)
            self.aside.forget(st.seq)
        self.calibrations.pop(job.id, None)
        self.beam_rounds.forget(job)

    def reject(self, reason: Exception) -> None:
        """A malformed, stray or forged message: counted (in the record of the jobs running), never fatal."""
        self.counters.rejected_messages += 1
        if not self.jobs:
            self.rejected_unclaimed += 1
        n = self.counters.rejected_messages
        if n <= 20 or n % 10_000 == 0:  # a flood must not fill the log: the first few, then a count
            print(f"verifier: rejected message {n}: {reason}", file=sys.stderr)

    def finished_jobs(self) -> list[JobState]:
        return [j for j in self.jobs.values() if j.done]

    def admit(self, draft: Draft, reply_to: bytes, arrival: float) -> None:
        """Validate a draft and queue it; anything off is a ProtocolError (counted, never fatal).

        A draft must extend a sequence of a running job, come from the worker that owns it (by ZeroMQ
        identity), be for the round the verifier expects next, and be the only one of its sequence
        waiting - so a stray or forged message can never take a sequence's turn.
        """
        st = self.seqs.get(draft.seq)
        if st is None or st.owner < 0:
            raise ProtocolError(f"draft for sequence {draft.seq}, which is not part of a running job")
        if draft.worker != st.owner:
            raise ProtocolError(f"draft for sequence {draft.seq} from worker {draft.worker}, not from its worker "
                                f"{st.owner}")
        check_sender(reply_to, st.owner, f"draft for sequence {draft.seq}")
        if st.done:
            raise ProtocolError(f"draft for finished sequence {draft.seq}")
        if draft.epoch != st.epoch:
            raise ProtocolError(f"draft for sequence {draft.seq} from epoch {draft.epoch} of its worker, "
                                f"now {st.epoch}")
        if draft.round != st.rounds or draft.seq in self.queue.sequences() or draft.seq in self.riders:
            raise ProtocolError(f"draft round {draft.round} for sequence {draft.seq}, expected {st.rounds}")
        job = self.jobs[st.job]
        if job.config.beam_mode:
            raise ProtocolError(f"a plain draft for beam sequence {draft.seq}")
        if not job.config.sampling.greedy and (draft.q is None or not draft.q.fits(self.target.vocab_size)):
            raise ProtocolError(f"sampled draft for sequence {draft.seq} lacks a valid q")
        if len(draft.tokens) and not 0 <= int(draft.tokens.min()) <= int(draft.tokens.max()) < self.target.vocab_size:
            raise ProtocolError(f"draft for sequence {draft.seq} has a token outside the vocabulary")
        lanes = job.config.lanes.count * job.config.lanes.length if job.config.drafter != DrafterKind.MODEL else 0
        if draft.lanes > lanes:
            raise ProtocolError(f"draft for sequence {draft.seq} carries {draft.lanes} lane tokens; its job allows "
                                f"{job.config.lanes.count} lanes of {job.config.lanes.length}")
        self.enqueue(draft, reply_to, arrival, st, job)

    def enqueue(self, draft: Draft, reply_to: bytes, arrival: float, st: SequenceState, job: JobState) -> None:
        self.queue.push(draft, reply_to, arrival=arrival, verified_tokens=len(st.generated),
                        priority=job.config.priority_of(st.local), round=st.rounds, job=job.id,
                        job_arrival=job.arrival, job_priority=job.priority, deadline=job.deadline,
                        tokens_remaining=job.config.max_new_tokens - len(st.generated),
                        tickets=job.config.tickets_of(st.local), expected_tokens=st.yield_mean)

    def calibration(self, job: JobState) -> Calibration:
        return self.calibrations.setdefault(job.id, Calibration())

    def fail_speculative_jobs(self, message: str) -> None:
        """Every speculative job fails with `message` (its policy failed); each keeps what it counted so far."""
        for job in [j for j in self.jobs.values() if not j.target_only]:
            self.telemetry.send("job_failed", {**self._close(job), "message": message})
        self.queue, self.key = None, None

    def close_finished_jobs(self) -> None:
        for job in self.finished_jobs():
            self.telemetry.send("job_done", self._close(job))

    def _close(self, job: JobState) -> dict:
        """Forget `job`; what it tells the engine as it goes, finished or failed: its counters and the rest."""
        calibration = self.calibration(job).to_dict()
        beams = self.beam_rounds.result(job)
        self.finish_job(job)  # forgets the job's calibration (and settles its rejected-message count)
        curve = self.costs.curve()
        return {"job": job.id, "counters": _as_dict(job.counters), "cost_curve": curve.to_list() if curve else None,
                "calibration": calibration, "beams": beams, "verifier_threads": self.cores.report(job.id)}


def _as_dict(c: Counters) -> dict:
    return {k: getattr(c, k) for k in Counters.__slots__}
