"""The verifier's beam steps: how it admits, verifies and counts beam work (the rules are in beam_jobs.py,
the bookkeeping in beam_rounds.py). A beam round is its own forward: schedule.py picks it, this runs it and
settles it."""

from __future__ import annotations

import time

from ..runtime.backends.backend import LanguageModel, Traffic
from ..runtime.core.beam_messages import TreeDraft
from ..runtime.core.events import Recorder
from ..runtime.core.messages import Draft
from ..runtime.core.wire import ProtocolError
from .cores import Cores
from .job_book import JobBook
from .jobs import JobState, count_traffic, running_mean
from .postprocess import Postprocess
from .run_queue import PolicyFailure, Queued, Reply
from .schedule import Schedule


class BeamSteps:
    """Reads and writes the book's beam rounds; reports its commits through postprocess's one report."""

    def __init__(self, book: JobBook, schedule: Schedule, post: Postprocess, target: LanguageModel, cores: Cores,
                 recorder: Recorder) -> None:
        self.book, self.schedule, self.post = book, schedule, post
        self.target, self.cores, self.recorder = target, cores, recorder

    def admit_tree(self, d: TreeDraft, reply_to: bytes, arrival: float) -> None:
        """A beam slot's tree; when the round is complete the sequence is queued as one ready draft."""
        st = self.book.seqs.get(d.seq)
        if st is None:
            raise ProtocolError(f"tree for sequence {d.seq}, which is not part of a running job")
        job = self.book.jobs[st.job]
        if self.book.beam_rounds.admit(d, reply_to, job):
            self.book.enqueue(Draft.chain(d.seq, st.owner, st.rounds, self.book.beam_rounds.nodes(d.seq).tolist()), b"",
                         arrival, st, job)

    def join(self, fields: dict, reply_to: bytes) -> Reply:
        """A worker the engine sent for a vacant slot: it takes the slot and is given the slot's beam."""
        seq, slot, worker = int(fields["seq"]), int(fields["slot"]), int(fields["worker"])
        given = self.book.beam_rounds.join(seq, slot, worker, reply_to, int(fields["want"]), int(fields["epoch"]))
        return Reply(given, reply_to, worker)

    def resume(self, fields: dict, reply_to: bytes) -> Reply | None:
        """A restarted beam worker: its slot's task (beam_rounds.py). A sequence is queued only while its round
        is complete, so one whose tree was dropped to be drafted again leaves the run queue. A live worker's
        probe (``probe``: the round of the tree it sent) is answered by BeamRounds.probe; None: no answer (its
        tree waits in its round, or its sequence is not this verifier's yet)."""
        seq, slot, worker = int(fields["seq"]), int(fields["slot"]), int(fields["worker"])
        if seq in self.book.seqs and seq not in self.book.beam_rounds.seqs:
            raise ProtocolError(f"beam_resume for sequence {seq}, which is not a beam sequence")
        if int(fields.get("probe", -1)) >= 0:
            # a sequence not given to this verifier yet: the resync will answer
            if seq not in self.book.seqs and seq not in self.book.closed:
                return None
            task = self.book.beam_rounds.probe(seq, slot, worker, reply_to, int(fields["epoch"]), int(fields["probe"]))
            return None if task is None else Reply(task, reply_to, worker)
        answer = self.book.beam_rounds.resume(seq, slot, worker, reply_to, int(fields["want"]), int(fields["epoch"]))
        beams = self.book.beam_rounds.seqs.get(seq)
        if beams is not None and not beams.complete and self.book.queue is not None:
            self.book.queue.drop(lambda q: q.draft.seq == seq)
        return Reply(answer, reply_to, worker)

    def verify(self, entry: Queued) -> list:
        """One round of a dsbd sequence: one target forward over its forest; every slot gets its task."""
        st = self.book.seqs[entry.draft.seq]
        job = self.book.jobs[st.job]
        threads = self.cores.before_forward(self.schedule.drafting_workers({st.seq}))
        t0, before = time.monotonic(), self.target.traffic.copy()
        try:
            kept, answers, want, n = self.book.beam_rounds.run(st.seq, job)
        except (ValueError, IndexError) as exc:  # a backstop: the trees were checked whole when filed
            self.book.finish_job(job)
            self.book.telemetry.send("job_failed", {"job": job.id, "message": f"verifier: {type(exc).__name__}: {exc}"})
            return []
        self._count_beam_round(job, st, kept, n, threads, t0, before)
        wanted = self.book.beam_rounds.seqs[st.seq].wanted
        for slot in want:  # the width widened: the engine sends a worker for each new slot (beam_join)
            self.book.telemetry.send("beam_want", {"job": job.id, "seq": st.seq, "slot": slot, "round": wanted[slot]})
        try:
            self.book.queue.served([entry], n["seconds"], [len(kept)])
        except PolicyFailure as exc:
            self.book.fail_speculative_jobs(f"verifier: PolicyFailure: {exc}")
            return []
        return [Reply(task, reply_to, worker) for reply_to, worker, task in answers]

    def target_step(self, job: JobState) -> None:
        """--mode beam: one round of target-only beam sampling (or search) for the job."""
        threads = self.cores.before_forward(self.schedule.drafting_workers())
        t0, before = time.monotonic(), self.target.traffic.copy()
        st = next(s for s in job.sequences if not s.done)  # one sequence after another, as ``ar``
        kept, _, _, n = self.book.beam_rounds.run(st.seq, job)
        self._count_beam_round(job, st, kept, n, threads, t0, before)

    def _count_beam_round(self, job: JobState, st, kept: list[int], n: dict, threads: int, t0: float,
                          before: Traffic) -> None:
        st.rounds += 1
        st.yield_mean = running_mean(st.yield_mean, len(kept), st.rounds)  # what a policy expects of its rounds
        self.cores.add({job.id}, threads, n["seconds"])
        count_traffic(self.target.traffic.since(before), [self.book.counters, job.counters])
        for c in (self.book.counters, job.counters):
            c.verifications += 1
            c.drafted += n["drafted"]
            c.accepted += n["accepted"]
            c.committed += len(kept)
            c.batched_drafts += 1 if n["drafted"] else 0
        self.recorder.add("verify", t0, time.monotonic(), st.seq, job.id)
        self.post.report_commits([(st, kept, st.owner)])
