"""The verifier's third phase: after a forward, each row settled (acceptance.py), its tokens committed and
counted, and the verdicts made; riders keep theirs until their ride ends. Then the events, the engine's
commits (before any worker hears) and the policy's ``served``.
"""

from __future__ import annotations

import time

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.events import Recorder
from ..runtime.core.messages import Verdict
from .features import attach, keep_features
from .forward import Forward
from .job_book import JobBook
from .jobs import SequenceState, commit, running_mean
from .layout import lane_predictions, settle
from .run_queue import PolicyFailure, Queued, Reply
from .step_aside import Rider


class Postprocess:
    """Writes the book (commits, counters, calibration, riders) and tells the engine and the policy."""

    def __init__(self, book: JobBook, target: LanguageModel, recorder: Recorder) -> None:
        self.book, self.target, self.recorder = book, target, recorder

    def verdicts(self, entries: list[Queued], fwd: Forward) -> list[Reply]:
        """The verdicts due after `fwd`, which read `entries` and then the riders' rows."""
        book, riders, states, t0, t1 = self.book, fwd.riders, fwd.states, fwd.t0, fwd.t1
        curve = book.costs.curve()
        replies, commits, resampled = [], [], False
        fresh: list[Verdict] = []   # verdicts of this forward's drafts (a released rider keeps its own times)
        for i, (st, (tokens, parents, q, n_lanes), layout, rows) in enumerate(
                zip(states, fwd.drafts, fwd.layouts, fwd.logits)):
            job = book.jobs[st.job]
            predictions = lane_predictions(layout, rows, len(tokens), n_lanes)
            outcome = settle(self.target, st.cache, layout, rows, tokens, parents, q, job.config.sampling, st.draws(),
                             n_lanes, st.race())
            keep_features(self.target, st, layout, fwd.features[i] if fwd.features else None, outcome.path)
            kept = commit(st, outcome.tokens, self.target.eos_token_id, job.config.max_new_tokens)
            resampled |= outcome.resampled
            for c in (book.counters, job.counters):
                c.drafted += len(tokens) - n_lanes
                c.lane_tokens += n_lanes
                c.accepted += outcome.accepted
                c.committed += len(kept)
            if i >= len(entries):  # a rider: its tokens wait with its verdict
                replies += self._ride(riders[i - len(entries)], st, kept, commits)
                continue
            e, d = entries[i], entries[i].draft
            st.rounds += 1
            st.yield_mean = running_mean(st.yield_mean, len(kept), st.rounds)
            commits.append((st, kept, d.worker))
            book.calibration(job).add(d.conf, d.parents[:d.candidates], outcome.path,
                                      greedy=job.config.sampling.greedy)
            verdict = Verdict(d.seq, d.round, outcome.accepted, np.asarray(kept, np.int32),
                              np.asarray(outcome.path, np.int32), st.done, t0, 0.0, e.info.arrival,
                              curve.to_list() if curve else None, len(book.queue) if book.queue else 0,
                              epoch=d.epoch, predictions=predictions)
            aside = 0 if st.done or not job.config.steps_aside else book.aside.rounds_aside(
                st.seq, len(kept), len(d.tokens), d.draft_s, curve)
            fresh.append(verdict)
            if aside:
                book.riders[st.seq] = Rider(st.seq, e.reply_to, d.worker, verdict, aside)
            else:
                replies.append(Reply(attach(verdict, st), e.reply_to, d.worker))
        self._count_forward(entries, states)
        t2 = time.monotonic()
        self._events(states, resampled, t0, t1, t2)
        for v in fresh:
            v.verify_end = t2
        self.report_commits(commits)  # the engine hears of committed tokens before any worker does
        if entries:  # the policy hears what each pick cost (a batch's time shared equally)
            try:
                book.queue.served(entries, (t1 - t0) / len(entries), [len(k) for _, k, _ in commits[:len(entries)]])
            except PolicyFailure as exc:  # as for pick: its jobs fail, with every token verified so far kept
                book.fail_speculative_jobs(f"verifier: PolicyFailure: {exc}")
                return []
        return replies

    def _ride(self, rider: Rider, st: SequenceState, kept: list[int], commits: list) -> list[Reply]:
        """A rider's row: its tokens wait with its verdict, which is due when its ride (or sequence) ends."""
        book = self.book
        rider.kept += kept
        rider.left -= 1
        commits.append((st, kept, rider.worker))
        for c in (book.counters, book.jobs[st.job].counters):
            c.aside_tokens += len(kept)
        if not (st.done or rider.left <= 0):
            return []
        del book.riders[rider.seq]
        return [Reply(attach(rider.release(st.done), st), rider.reply_to, rider.worker)]

    def _count_forward(self, entries: list[Queued], states: list[SequenceState]) -> None:
        """One verification, for the verifier and for each job it served (a forward shared by several jobs
        counts for each), and the drafts it batched."""
        book = self.book
        book.counters.verifications += 1
        book.counters.batched_drafts += len(entries)
        for job_id in {st.job for st in states}:
            book.jobs[job_id].counters.verifications += 1
        for st in states[:len(entries)]:
            book.jobs[st.job].counters.batched_drafts += 1

    def _events(self, states: list[SequenceState], resampled: bool, t0: float, t1: float, t2: float) -> None:
        # a single row names its sequence; a forward that served one job names the job (the engine files
        # it there); a batch across jobs names neither, and every running job shares it
        seq = states[0].seq if len(states) == 1 else -1
        jobs = {st.job for st in states}
        job = next(iter(jobs)) if len(jobs) == 1 else -1
        if resampled:
            self.recorder.add("verify", t0, t1, seq, job)
            self.recorder.add("resample", t1, t2, seq, job)
        else:
            self.recorder.add("verify", t0, t2, seq, job)

    def report_commits(self, commits: list[tuple[SequenceState, list[int], int]]) -> None:
        """(sequence, tokens it committed, worker or -1 for target-only) for each row of a forward. A beam
        sequence's commit also says where its beams stand (beam_jobs.py): the engine keeps it for a new
        verifier, should this one die."""
        book = self.book
        for st, kept, worker in commits:
            fields = {"seq": st.seq, "worker": worker, "done": st.done}
            if st.seq in book.beam_rounds.seqs:
                fields["beam"] = book.beam_rounds.seqs[st.seq].state().to_dict()
            book.telemetry.send("commit", fields, {"tokens": np.asarray(kept, np.int32)})
        book.telemetry.events(self.recorder.drain())
