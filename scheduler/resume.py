"""The verifier's side of a restart: a new worker process asks where its sequence stands.

What the dead worker had sent and not had answered is dropped - its run-queue entry, or its ride aside
(step_aside.py; every token a rider decoded is committed already) - so the new worker's first draft is
the sequence's next one. From then on only drafts of the new *epoch* are admitted (``Verifier.admit``):
a draft of the dead process still in a socket can never take the sequence's turn. Nothing verified is
touched: the answer is the committed context, which the worker drafts on from. A live worker's probe
(``probe``) is answered the same way and changes nothing.
"""

from __future__ import annotations

import numpy as np

from ..runtime.core.resume import Resume, Resumed
from ..runtime.core.transport import check_sender
from ..runtime.core.wire import ProtocolError


def resume(verifier, r: Resume, reply_to: bytes) -> Resumed | None:
    """`verifier`: the Verifier (its book: sequences, run queue and riders). None: nothing to answer (a probe
    about a sequence this verifier has not been given yet)."""
    if r.probe >= 0:
        return probe(verifier, r, reply_to)
    book = verifier.book
    check_sender(reply_to, r.worker, f"resume of sequence {r.seq}")
    st = book.seqs.get(r.seq)
    if st is None or st.owner != r.worker or r.epoch <= st.epoch:
        raise ProtocolError(f"resume of sequence {r.seq} from {reply_to!r} (epoch {r.epoch}): not the newest "
                            f"incarnation of its worker")
    st.epoch = r.epoch
    if book.queue is not None:
        book.queue.drop(lambda q: q.draft.seq == r.seq)
    book.riders.pop(r.seq, None)
    return Resumed(r.seq, st.rounds, st.done, np.asarray(st.context, np.int32), r.epoch)


def probe(verifier, r: Resume, reply_to: bytes) -> Resumed | None:
    """A live worker waited a verdict timeout (runtime/core/resume.py): where its sequence stands, nothing
    changed. Its messages arrive in the order it sent them, so a draft it sent before the probe is queued
    by now (or riding aside: its verdict held), or verified, or was lost on the way. A sequence this verifier
    does not hold is either closed here (the lost verdict said done) or not given to it yet (a new verifier,
    before the engine announces the job again and resyncs the worker): then nothing is answered."""
    book = verifier.book
    check_sender(reply_to, r.worker, f"probe of sequence {r.seq}")
    st = book.seqs.get(r.seq)
    if st is None:
        if r.seq not in book.closed:
            return None
        return Resumed(r.seq, r.probe, True, np.zeros(0, np.int32), r.epoch, r.probe)
    if st.owner != r.worker or r.epoch != st.epoch:
        raise ProtocolError(f"probe of sequence {r.seq} from worker {r.worker} (epoch {r.epoch}): not its worker")
    queued = (book.queue is not None and r.seq in book.queue.sequences()) or r.seq in book.riders
    return Resumed(r.seq, st.rounds, st.done, np.asarray(st.context, np.int32), r.epoch, r.probe, queued)
