"""Target-only decoding in the verifier process, for fair baselines on the same runtime.

``ar``: a job's sequences one after another, one token per target forward (serial autoregressive).
``parallel``: every unfinished sequence of the job advances one token per batched target forward (the
SEED paper's Figure 1(d)). Both sample from their own per-sequence stream, so with ``--temperature 0``
they produce exactly what the speculative modes produce. The verifier takes one such step whenever no
draft is ready, so a target-only job can share the engine with speculative ones.
"""

from __future__ import annotations

import time

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.config import Mode
from ..runtime.core.costs import CostFit
from ..runtime.core.events import Recorder
from .acceptance import next_token
from .cores import Cores
from .jobs import JobState, SequenceState, commit, count_traffic


def target_only_step(job: JobState, target: LanguageModel, recorder: Recorder, costs: CostFit,
                     cores: Cores, drafting: int) -> list[tuple[SequenceState, list[int]]]:
    """One target forward for `job` (timed into `costs`, its threads chosen by `cores` with `drafting`
    workers busy); returns what each advanced sequence committed."""
    unfinished = [st for st in job.sequences if not st.done]
    active = unfinished if job.config.mode == Mode.PARALLEL else unfinished[:1]
    threads = cores.before_forward(drafting)
    t0 = time.monotonic()
    before = target.traffic.copy()
    unread = [target.sync_to(st.cache, st.context) for st in active]
    logits = target.forward_batch([st.cache for st in active], unread, first_rows=[len(u) - 1 for u in unread])
    count_traffic(target.traffic.since(before), [job.counters])
    seconds = time.monotonic() - t0
    costs.add_forward([len(u) for u in unread], seconds)
    cores.add([job.id], threads, seconds)
    out = []
    for st, rows in zip(active, logits):
        kept = commit(st, [next_token(rows[-1], job.config.sampling, st.draws(), st.race())], target.eos_token_id,
                      job.config.max_new_tokens)
        job.counters.committed += len(kept)
        out.append((st, kept))
    job.counters.verifications += 1
    recorder.add("verify", t0, time.monotonic(), active[0].seq if len(active) == 1 else -1, job.id)
    return out
