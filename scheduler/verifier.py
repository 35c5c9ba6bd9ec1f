"""The target-verifier: one turn is schedule -> run -> postprocess, each phase with its owner.

- schedule (schedule.py ``Schedule``): the policy picks ready drafts from the run queue (under --lockstep
  only once every live sequence's draft is queued); else the riders (step_aside.py) or a target-only job
  (``ar``, ``parallel``, ``--mode beam``) take the turn;
- run (forward.py ``Runner``): one target forward over each picked sequence's unread prefix and draft;
- postprocess (postprocess.py ``Postprocess``): acceptance, commits, counters and verdicts; the engine hears
  of the commits first, then the policy of what it served.

All three read and write the verifier's book of work (job_book.py ``JobBook``); a beam round runs and settles
in beam_steps.py. ``serve.py`` is the process around it: it admits jobs from the engine and drafts from the
workers, and sends what ``step`` produced.
"""

from __future__ import annotations

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.beam_messages import TreeDraft
from ..runtime.core.config import Mode
from ..runtime.core.costs import CostFit
from ..runtime.core.events import VERIFIER, Recorder
from ..runtime.core.messages import Draft
from ..runtime.core.transport import Telemetry
from .beam_steps import BeamSteps
from .cores import Cores
from .forward import Forward, Runner
from .job_book import JobBook
from .jobs import Counters, JobState, SequenceState, commit
from .postprocess import Postprocess
from .run_queue import Queued, Reply
from .schedule import Schedule
from .target_only import target_only_step

__all__ = ["Counters", "Forward", "Reply", "Verifier", "commit"]


class Verifier:
    def __init__(self, target: LanguageModel, telemetry: Telemetry, cores: Cores | None = None) -> None:
        self.target = target
        self.cores = cores or Cores()   # its threads, forward by forward (cores.py)
        self.costs = CostFit()          # the target's measured forward cost (runtime/core/costs.py)
        self.recorder = Recorder("verifier", VERIFIER)
        self.book = JobBook(target, telemetry, self.costs, self.cores)
        self.schedule = Schedule(self.book, self.recorder)
        self.runner = Runner(self.book, self.schedule, target, self.cores, self.costs)
        self.post = Postprocess(self.book, target, self.recorder)
        self.beams = BeamSteps(self.book, self.schedule, self.post, target, self.cores, self.recorder)

    # -- one turn ----------------------------------------------------------------------------------------
    def step(self, idle_since: float) -> list[Reply]:
        """One turn; returns the verdicts (and beam tasks) to send, empty when none is due."""
        work = self.schedule.next(idle_since)
        if work is None:
            return []
        if work.target_only is not None:
            self._target_only(work.target_only)
            return []
        replies = self.verify(work.drafts) if work.drafts or work.riders_only else []
        for e in work.beams:
            if self.book.queue is None:  # a policy failure ended the speculative jobs: nothing left to verify
                break
            if e.draft.seq in self.book.seqs:
                replies += self.beams.verify(e)
        return replies

    def verify(self, entries: list[Queued]) -> list[Reply]:
        """Verify picked drafts in one target forward (a batch when the policy picked several), with a row
        of one token for every rider: run, then postprocess. Held verdicts stay with their rider."""
        return self.post.verdicts(entries, self.runner.run(entries))

    def _target_only(self, job: JobState) -> None:
        if job.config.mode == Mode.BEAM:
            self.beams.target_step(job)
            return
        commits = target_only_step(job, self.target, self.recorder, self.costs, self.cores,
                                   self.schedule.drafting_workers())
        self.post.report_commits([(st, kept, -1) for st, kept in commits])

    # -- what serve.py hands over ------------------------------------------------------------------------
    def add_job(self, job: JobState) -> None:
        self.book.add_job(job)

    def finish_job(self, job: JobState) -> None:
        self.book.finish_job(job)

    def close_finished_jobs(self) -> None:
        self.book.close_finished_jobs()

    def fail_speculative_jobs(self, message: str) -> None:
        self.book.fail_speculative_jobs(message)

    def admit(self, draft: Draft, reply_to: bytes, arrival: float) -> None:
        self.book.admit(draft, reply_to, arrival)

    def admit_tree(self, d: TreeDraft, reply_to: bytes, arrival: float) -> None:
        self.beams.admit_tree(d, reply_to, arrival)

    def join_beam(self, fields: dict, reply_to: bytes) -> Reply:
        return self.beams.join(fields, reply_to)

    def resume_beam(self, fields: dict, reply_to: bytes) -> Reply | None:
        return self.beams.resume(fields, reply_to)

    def reject(self, reason: Exception) -> None:
        self.book.reject(reason)

    def ready_to_pick(self) -> bool:
        return self.schedule.ready_to_pick()

    def has_target_only_work(self) -> bool:
        return self.schedule.has_target_only_work()

    # -- the book, read ------------------------------------------------------------------------------------
    @property
    def jobs(self) -> dict[int, JobState]:
        return self.book.jobs

    @property
    def seqs(self) -> dict[int, SequenceState]:
        return self.book.seqs

    @property
    def queue(self):
        return self.book.queue

    @property
    def counters(self) -> Counters:
        return self.book.counters

    @property
    def telemetry(self) -> Telemetry:
        return self.book.telemetry

    @telemetry.setter
    def telemetry(self, telemetry: Telemetry) -> None:
        self.book.telemetry = telemetry
