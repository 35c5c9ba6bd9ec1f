"""Target-only decoding in the verifier process, for fair baselines on the same runtime.

``ar``: sequences one after another, one token per target forward (serial autoregressive).
``parallel``: every unfinished sequence advances one token per batched target forward (the SEED
paper's Figure 1(d)). Both sample from their own per-sequence stream, so with ``--temperature 0``
they produce exactly what the speculative modes produce.
"""

from __future__ import annotations

import time

import numpy as np

from specsched.runtime.config import RunConfig
from specsched.runtime.events import VERIFIER, Recorder
from specsched.runtime.sampling import stream
from specsched.runtime.transport import Telemetry
from specsched.scheduler.acceptance import next_token
from specsched.scheduler.verifier import Counters, SequenceState, commit
from specsched.workers.backend import LanguageModel


def serve_target_only(config: RunConfig, target: LanguageModel, sequences: list[tuple[int, list[int]]],
                      telemetry: Telemetry, parent_alive) -> Counters:
    recorder = Recorder("verifier", VERIFIER)
    counters = Counters()
    states = [SequenceState(seq, list(prompt), target.new_cache(), stream(config.seed, seq, "target"))
              for seq, prompt in sequences]
    groups = [states] if config.mode == "parallel" else [[st] for st in states]
    for group in groups:
        while parent_alive():
            active = [st for st in group if not st.done]
            if not active:
                break
            t0 = time.monotonic()
            unread = [target.sync_to(st.cache, st.context) for st in active]
            logits = target.forward_batch([st.cache for st in active], unread)
            for st, rows in zip(active, logits):
                kept = commit(st, [next_token(rows[-1], config.sampling, st.rng)],
                              target.eos_token_id, config.max_new_tokens)
                counters.committed += len(kept)
                telemetry.send("commit", {"seq": st.seq, "worker": st.seq, "done": st.done},
                               {"tokens": np.asarray(kept, np.int32)})
            counters.verifications += 1
            recorder.add("verify", t0, time.monotonic())
            telemetry.events(recorder.drain())
    return counters
