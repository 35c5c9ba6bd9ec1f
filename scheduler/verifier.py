"""The target-verifier process: pick (policy) -> verify (target model) -> reply (verdict).

``Verifier.step()`` is one turn of the dispatcher, the seam between the three phases: the policy
schedules (picks ready drafts from the run queue, with --lockstep only once every live sequence's
draft is queued), the target runs (one forward over each picked sequence's unread prefix plus its
draft), and postprocessing decides acceptance, commits tokens, and hands back verdicts. Target-only
jobs (``ar``, ``parallel``) and riders (step_aside.py) take a step whenever no draft is ready.
``serve.py`` is the process around it: it admits jobs from the engine and drafts from the workers,
and sends what ``step`` produced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.calibration import Calibration
from ..runtime.core.config import Mode
from ..runtime.core.costs import CostFit
from ..runtime.core.draft_q import DraftQ
from ..runtime.core.events import VERIFIER, Recorder
from ..runtime.core.messages import Verdict
from ..runtime.core.transport import Telemetry
from .beam_rounds import BeamRounds
from .beam_steps import BeamSteps
from .cores import Cores
from .features import attach, keep_features, wanted
from .job_book import JobBook
from .jobs import Counters, JobState, SequenceState, commit, count_traffic, running_mean
from .layout import lane_predictions, lay_out, settle
from .run_queue import PolicyFailure, Queued, Reply, RunQueue
from .step_aside import Rider, StepAside
from .target_only import target_only_step

NO_TOKENS = np.zeros(0, np.int32)  # a rider's draft: nothing, so its row is one token read by the target alone


@dataclass(slots=True)
class Forward:
    """What one target forward read and gave: its rows (the picked drafts', then the riders'), each row's
    draft (tokens, parents, q, lane tokens) and layout, the logits, the features (when asked) and its times."""
    riders: list[Rider]
    states: list[SequenceState]
    drafts: list[tuple]
    layouts: list
    logits: list
    features: list | None
    t0: float
    t1: float

__all__ = ["Counters", "Reply", "Verifier", "commit"]


class Verifier(JobBook, BeamSteps):
    def __init__(self, target: LanguageModel, telemetry: Telemetry, cores: Cores | None = None) -> None:
        self.target = target
        self.beam_rounds = BeamRounds(target)  # beam sequences (beam_steps.py)
        self.cores = cores or Cores()   # its threads, forward by forward (cores.py)
        self.telemetry = telemetry
        self.recorder = Recorder("verifier", VERIFIER)
        self.jobs: dict[int, JobState] = {}
        self.seqs: dict[int, SequenceState] = {}
        self.counters = Counters()      # over the verifier's life; each job keeps its own too
        self.queue: RunQueue | None = None
        self.key: tuple | None = None
        self.rejected_unclaimed = 0     # rejected while no job ran: counted by the next job
        self.costs = CostFit()          # the target's measured forward cost (runtime/core/costs.py)
        self.aside = StepAside()
        self.riders: dict[int, Rider] = {}            # sequences decoded alone for now, by global id
        self.closed: set[int] = set()                 # sequences of jobs finished or cancelled here (resume.py)
        self.riders_next = False
        self.calibrations: dict[int, Calibration] = {}  # per job: acceptance by draft confidence

    # -- schedule -----------------------------------------------------------------------------------
    def owing(self) -> int:
        """Drafts still owed to the run queue over every speculative job (see JobState.owing)."""
        return sum(j.owing() for j in self.jobs.values() if not j.target_only) - len(self.riders)

    def ready_to_pick(self) -> bool:
        """Ask the policy now? Something is queued and, under --lockstep, every sequence that owes a draft
        has one queued, so the policy sees the whole step. Never a deadlock: a sequence that owes a draft
        and has none queued is being drafted, and a finished one stops being owed."""
        if self.queue is None or not len(self.queue):
            return False
        return not self.key[2] or len(self.queue) >= self.owing()

    def ready_since(self) -> float:
        """When the queue became ready: its oldest arrival, or under --lockstep the arrival that completed
        the step (until then the verifier was waiting, not working)."""
        return self.queue.newest_arrival if self.key[2] else self.queue.oldest_arrival

    # -- one step: schedule -> run -> postprocess ---------------------------------------------------
    def step(self, idle_since: float) -> list[Reply]:
        """One turn: verify what the policy picks (riders join that forward), else advance the riders or
        the target-only jobs by one forward. Returns the verdicts to send (empty when none is due)."""
        if self.ready_to_pick():
            self.recorder.add("idle", idle_since, self.ready_since())
            try:
                picked = self.queue.pick(self.costs.curve())
            except PolicyFailure as exc:  # a broken plug-in ends the jobs it schedules, not the verifier
                self.fail_speculative_jobs(f"verifier: PolicyFailure: {exc}")
                return []
            beams = [e for e in picked if e.draft.seq in self.beam_rounds.seqs]
            replies = self.verify([e for e in picked if e not in beams]) if len(beams) < len(picked) else []
            for e in beams:
                if self.queue is None:  # a policy failure ended the speculative jobs: nothing left to verify
                    break
                if e.draft.seq in self.seqs:
                    replies += self.verify_beam(e)
            return replies
        self.riders_next = not self.riders_next  # riders and target-only jobs take turns: neither starves
        if self.riders and (self.riders_next or not self.has_target_only_jobs()):
            return self.verify([])
        for job in self.jobs.values():
            if job.target_only and not job.done and job.config.mode == Mode.BEAM:
                self.beam_target_step(job)
                return []
            if job.target_only and not job.done:
                commits = target_only_step(job, self.target, self.recorder, self.costs, self.cores,
                                           self.drafting_workers())
                self._report_commits([(st, kept, -1) for st, kept in commits])
                return []
        return []

    def drafting_workers(self, verifying: set[int] = frozenset()) -> int:
        """Workers drafting now. A worker drafts its first live sequence (sd serves them one after another)
        unless that one's draft is queued, riding or being verified; a beam sequence's slots count apart."""
        idle = verifying | set(self.riders) | (self.queue.sequences() if self.queue is not None else set())
        current: dict[int, int] = {}
        for st in sorted(self.seqs.values(), key=lambda s: s.seq):
            if st.owner >= 0 and not st.done and not st.beam_workers:
                current.setdefault(st.owner, st.seq)
        return sum(seq not in idle for seq in current.values()) + self.beam_rounds.drafting(idle)

    def has_target_only_jobs(self) -> bool:
        return any(j.target_only and not j.done for j in self.jobs.values())

    def has_target_only_work(self) -> bool:
        return bool(self.riders) or self.has_target_only_jobs()

    def verify(self, entries: list[Queued]) -> list[Reply]:
        """Verify the picked drafts in one target forward (a batch when the policy picked several), with a
        row of one token for every rider (step_aside.py): run, then postprocess. Returns the verdicts due:
        held ones stay with their rider."""
        return self.postprocess(entries, self.run(entries))

    # -- run: one target forward ---------------------------------------------------------------------
    def run(self, entries: list[Queued]) -> Forward:
        """One target forward over the picked drafts and the riders' rows; how each is read and what the
        cache keeps afterwards is layout.py's rule."""
        riders = list(self.riders.values())
        states = [self.seqs[e.draft.seq] for e in entries] + [self.seqs[r.seq] for r in riders]
        threads = self.cores.before_forward(self.drafting_workers({st.seq for st in states}))
        t0 = time.monotonic()
        drafts = [(e.draft.tokens, e.draft.parents, e.draft.q, e.draft.lanes) for e in entries]
        drafts += [(NO_TOKENS, NO_TOKENS, None if self.jobs[st.job].config.sampling.greedy
                    else DraftQ.of([], self.target.vocab_size), 0) for st in states[len(entries):]]
        for e in entries:  # a target that cannot give features answers as if the draft had asked for none
            self.seqs[e.draft.seq].held = e.draft.held if self.target.gives_features else -1
        self.target.want_features = wanted(states)
        before = self.target.traffic.copy()  # the rollback of each cache (lay_out) counts too
        layouts = [lay_out(self.target, st.cache, st.context, tokens, parents)
                   for st, (tokens, parents, _, _) in zip(states, drafts)]
        caches = [st.cache for st in states]
        if len(states) == 1:
            logits = [self.target.forward(caches[0], layouts[0].tokens, layouts[0].parents,
                                          first_row=layouts[0].first_row)]
        else:
            logits = self.target.forward_batch(caches, [x.tokens for x in layouts], [x.parents for x in layouts],
                                               [x.first_row for x in layouts])
        t1 = time.monotonic()
        features = self.target.features if self.target.want_features else None
        self.target.want_features = False  # target-only and beam forwards read none
        count_traffic(self.target.traffic.since(before), [self.counters, *(self.jobs[j].counters for j in
                                                                           {st.job for st in states})])
        self.costs.add_forward([len(x.tokens) for x in layouts], t1 - t0)
        self.cores.add({st.job for st in states}, threads, t1 - t0)
        return Forward(riders, states, drafts, layouts, logits, features, t0, t1)

    # -- postprocess: acceptance, commits, verdicts --------------------------------------------------
    def postprocess(self, entries: list[Queued], fwd: Forward) -> list[Reply]:
        """Settle each row (acceptance.py), commit, count, and make the verdicts; riders keep theirs until
        their ride ends. Then the events, the engine's commits and the policy's ``served``."""
        riders, states, t0, t1 = fwd.riders, fwd.states, fwd.t0, fwd.t1
        curve = self.costs.curve()
        replies, commits, resampled = [], [], False
        fresh: list[Verdict] = []   # verdicts of this forward's drafts (a released rider keeps its own times)
        for i, (st, (tokens, parents, q, n_lanes), layout, rows) in enumerate(
                zip(states, fwd.drafts, fwd.layouts, fwd.logits)):
            job = self.jobs[st.job]
            predictions = lane_predictions(layout, rows, len(tokens), n_lanes)
            outcome = settle(self.target, st.cache, layout, rows, tokens, parents, q, job.config.sampling, st.draws(),
                             n_lanes, st.race())
            keep_features(self.target, st, layout, fwd.features[i] if fwd.features else None, outcome.path)
            kept = commit(st, outcome.tokens, self.target.eos_token_id, job.config.max_new_tokens)
            resampled |= outcome.resampled
            for c in (self.counters, job.counters):
                c.drafted += len(tokens) - n_lanes
                c.lane_tokens += n_lanes
                c.accepted += outcome.accepted
                c.committed += len(kept)
            if i >= len(entries):  # a rider: its tokens wait with its verdict
                rider = riders[i - len(entries)]
                rider.kept += kept
                rider.left -= 1
                commits.append((st, kept, rider.worker))
                for c in (self.counters, job.counters):
                    c.aside_tokens += len(kept)
                if st.done or rider.left <= 0:
                    del self.riders[rider.seq]
                    replies.append(Reply(attach(rider.release(st.done), st), rider.reply_to, rider.worker))
                continue
            e, d = entries[i], entries[i].draft
            st.rounds += 1
            st.yield_mean = running_mean(st.yield_mean, len(kept), st.rounds)
            commits.append((st, kept, d.worker))
            self.calibration(job).add(d.conf, d.parents[:d.candidates], outcome.path,
                                      greedy=job.config.sampling.greedy)
            verdict = Verdict(d.seq, d.round, outcome.accepted, np.asarray(kept, np.int32),
                              np.asarray(outcome.path, np.int32), st.done, t0, 0.0,
                              curve.to_list() if curve else None, len(self.queue) if self.queue else 0,
                              epoch=d.epoch, predictions=predictions)
            aside = 0 if st.done or not job.config.steps_aside else self.aside.rounds_aside(
                st.seq, len(kept), len(d.tokens), d.draft_s, curve)
            fresh.append(verdict)
            if aside:
                self.riders[st.seq] = Rider(st.seq, e.reply_to, d.worker, verdict, aside)
            else:
                replies.append(Reply(attach(verdict, st), e.reply_to, d.worker))
        self._count_forward(entries, states)
        t2 = time.monotonic()
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
        for v in fresh:
            v.verify_end = t2
        self._report_commits(commits)  # the engine hears of committed tokens before any worker does
        if entries:  # the policy hears what each pick cost (a batch's time shared equally)
            try:
                self.queue.served(entries, (t1 - t0) / len(entries), [len(k) for _, k, _ in commits[:len(entries)]])
            except PolicyFailure as exc:  # as for pick: its jobs fail, with every token verified so far kept
                self.fail_speculative_jobs(f"verifier: PolicyFailure: {exc}")
                return []
        return replies

    def _count_forward(self, entries: list[Queued], states: list[SequenceState]) -> None:
        """One verification, for the verifier and for each job it served (a forward shared by several jobs
        counts for each), and the drafts it batched."""
        self.counters.verifications += 1
        self.counters.batched_drafts += len(entries)
        for job_id in {st.job for st in states}:
            self.jobs[job_id].counters.verifications += 1
        for st in states[:len(entries)]:
            self.jobs[st.job].counters.batched_drafts += 1

    # -- postprocess: tell the engine ---------------------------------------------------------------
    def _report_commits(self, commits: list[tuple[SequenceState, list[int], int]]) -> None:
        """(sequence, tokens it committed, worker or -1 for target-only) for each row of a forward. A beam
        sequence's commit also says where its beams stand (beam_jobs.py): the engine keeps it for a new
        verifier, should this one die."""
        for st, kept, worker in commits:
            fields = {"seq": st.seq, "worker": worker, "done": st.done}
            if st.seq in self.beam_rounds.seqs:
                fields["beam"] = self.beam_rounds.seqs[st.seq].state().to_dict()
            self.telemetry.send("commit", fields, {"tokens": np.asarray(kept, np.int32)})
        self.telemetry.events(self.recorder.drain())
