"""The verifier's second phase: one target forward over the picked drafts and the riders' rows. How each row
is read, and what the cache keeps afterwards, is layout.py's rule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.costs import CostFit
from ..runtime.core.draft_q import DraftQ
from .cores import Cores
from .features import wanted
from .job_book import JobBook
from .jobs import SequenceState, count_traffic
from .layout import lay_out
from .run_queue import Queued
from .schedule import Schedule
from .step_aside import Rider

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


class Runner:
    """Owns the target's forwards: their threads (cores), their measured cost (costs) and traffic."""

    def __init__(self, book: JobBook, schedule: Schedule, target: LanguageModel, cores: Cores,
                 costs: CostFit) -> None:
        self.book, self.schedule, self.target, self.cores, self.costs = book, schedule, target, cores, costs

    def run(self, entries: list[Queued]) -> Forward:
        book, target = self.book, self.target
        riders = list(book.riders.values())
        states = [book.seqs[e.draft.seq] for e in entries] + [book.seqs[r.seq] for r in riders]
        threads = self.cores.before_forward(self.schedule.drafting_workers({st.seq for st in states}))
        t0 = time.monotonic()
        drafts = [(e.draft.tokens, e.draft.parents, e.draft.q, e.draft.lanes) for e in entries]
        drafts += [(NO_TOKENS, NO_TOKENS, None if book.jobs[st.job].config.sampling.greedy
                    else DraftQ.of([], target.vocab_size), 0) for st in states[len(entries):]]
        for e in entries:  # a target that cannot give features answers as if the draft had asked for none
            book.seqs[e.draft.seq].held = e.draft.held if target.gives_features else -1
        target.want_features = wanted(states)
        before = target.traffic.copy()  # the rollback of each cache (lay_out) counts too
        layouts = [lay_out(target, st.cache, st.context, tokens, parents)
                   for st, (tokens, parents, _, _) in zip(states, drafts)]
        caches = [st.cache for st in states]
        if len(states) == 1:
            logits = [target.forward(caches[0], layouts[0].tokens, layouts[0].parents,
                                     first_row=layouts[0].first_row)]
        else:
            logits = target.forward_batch(caches, [x.tokens for x in layouts], [x.parents for x in layouts],
                                          [x.first_row for x in layouts])
        t1 = time.monotonic()
        features = target.features if target.want_features else None
        target.want_features = False  # target-only and beam forwards read none
        jobs = {st.job for st in states}
        count_traffic(target.traffic.since(before), [book.counters, *(book.jobs[j].counters for j in jobs)])
        self.costs.add_forward([len(x.tokens) for x in layouts], t1 - t0)
        self.cores.add(jobs, threads, t1 - t0)
        return Forward(riders, states, drafts, layouts, logits, features, t0, t1)
