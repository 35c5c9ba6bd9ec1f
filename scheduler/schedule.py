"""The verifier's first phase: what one turn runs. The policy's pick when the run queue is ready; else the
riders or the target-only jobs, taking turns so that neither starves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..runtime.core.events import Recorder
from .job_book import JobBook
from .jobs import JobState
from .run_queue import PolicyFailure, Queued


@dataclass(slots=True)
class Work:
    """One turn's work: picked drafts (verified in one forward, the riders joining it) and beam rounds (one
    forward each); or the riders alone; or one target-only job's step."""
    drafts: list[Queued] = field(default_factory=list)
    beams: list[Queued] = field(default_factory=list)
    riders_only: bool = False
    target_only: JobState | None = None


class Schedule:
    """Reads the book; asks the policy (through the run queue) and records the verifier's idle time."""

    def __init__(self, book: JobBook, recorder: Recorder) -> None:
        self.book, self.recorder = book, recorder
        self.riders_next = False

    def next(self, idle_since: float) -> Work | None:
        """This turn's work, or None when there is none (or the policy failed: its jobs are failed)."""
        book = self.book
        if self.ready_to_pick():
            self.recorder.add("idle", idle_since, self.ready_since())
            try:
                picked = book.queue.pick(book.costs.curve())
            except PolicyFailure as exc:  # a broken plug-in ends the jobs it schedules, not the verifier
                book.fail_speculative_jobs(f"verifier: PolicyFailure: {exc}")
                return None
            beams = [e for e in picked if e.draft.seq in book.beam_rounds.seqs]
            return Work(drafts=[e for e in picked if e not in beams], beams=beams)
        self.riders_next = not self.riders_next
        if book.riders and (self.riders_next or not self.has_target_only_jobs()):
            return Work(riders_only=True)
        job = next((j for j in book.jobs.values() if j.target_only and not j.done), None)
        return None if job is None else Work(target_only=job)

    def owing(self) -> int:
        """Drafts still owed to the run queue over every speculative job (see JobState.owing)."""
        return sum(j.owing() for j in self.book.jobs.values() if not j.target_only) - len(self.book.riders)

    def ready_to_pick(self) -> bool:
        """Ask the policy now? Something is queued and, under --lockstep, every sequence that owes a draft
        has one queued, so the policy sees the whole step. Never a deadlock: a sequence that owes a draft
        and has none queued is being drafted, and a finished one stops being owed."""
        queue = self.book.queue
        if queue is None or not len(queue):
            return False
        return not self.book.key[2] or len(queue) >= self.owing()

    def ready_since(self) -> float:
        """When the queue became ready: its oldest arrival, or under --lockstep the arrival that completed
        the step (until then the verifier was waiting, not working)."""
        queue = self.book.queue
        return queue.newest_arrival if self.book.key[2] else queue.oldest_arrival

    def drafting_workers(self, verifying: set[int] = frozenset()) -> int:
        """Workers drafting now. A worker drafts its first live sequence (sd serves them one after another)
        unless that one's draft is queued, riding or being verified; a beam sequence's slots count apart."""
        book = self.book
        idle = verifying | set(book.riders) | (book.queue.sequences() if book.queue is not None else set())
        current: dict[int, int] = {}
        for st in sorted(book.seqs.values(), key=lambda s: s.seq):
            if st.owner >= 0 and not st.done and not st.beam_workers:
                current.setdefault(st.owner, st.seq)
        return sum(seq not in idle for seq in current.values()) + book.beam_rounds.drafting(idle)

    def has_target_only_jobs(self) -> bool:
        return any(j.target_only and not j.done for j in self.book.jobs.values())

    def has_target_only_work(self) -> bool:
        return bool(self.book.riders) or self.has_target_only_jobs()
