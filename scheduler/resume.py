"""The verifier's side of a restart: a new worker process asks where its sequence stands.

What the dead worker had sent and not had answered is dropped - its run-queue entry, or its ride aside
(step_aside.py; every token a rider decoded is committed already) - so the new worker's first draft is
the sequence's next one. From then on only drafts of the new *epoch* are admitted (``Verifier.admit``):
a draft of the dead process still in a socket can never take the sequence's turn. Nothing verified is
touched: the answer is the committed context, which the worker drafts on from.
"""

from __future__ import annotations

import numpy as np

from specsched.runtime.core.resume import Resume, Resumed
from specsched.runtime.core.transport import worker_identity
from specsched.runtime.core.wire import ProtocolError


def resume(verifier, r: Resume, reply_to: bytes) -> Resumed:
    """`verifier`: the Verifier (its sequences, run queue and riders)."""
    st = verifier.seqs.get(r.seq)
    if st is None or st.owner != r.worker or reply_to != worker_identity(r.worker) or r.epoch <= st.epoch:
        raise ProtocolError(f"resume of sequence {r.seq} from {reply_to!r} (epoch {r.epoch}): not the newest "
                            f"incarnation of its worker")
    st.epoch = r.epoch
    if verifier.queue is not None:
        verifier.queue.drop(lambda q: q.draft.seq == r.seq)
    verifier.riders.pop(r.seq, None)
    return Resumed(r.seq, st.rounds, st.done, np.asarray(st.context, np.int32), r.epoch)
