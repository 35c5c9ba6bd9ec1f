"""A beam worker's loop (dsbd): one draft process per beam slot of a sequence.

Each round the worker drafts the tree of the forest that grows from its slot's beam - as many nodes per
layer as the verifier's task says, from its own random stream keyed by (seed, sequence, slot, round) -
and sends it; a slot that holds no beam this round (the width is narrower, or the first round, before
any beam exists) sends an empty tree, so the verifier hears from every slot every round. The verdict
is the next task. The draft cache follows the slot's beam: ``sync_to`` keeps what the new beam shares
with the old one and reads the rest.
"""

from __future__ import annotations

import time

import numpy as np

from specsched.runtime.core.beam_messages import BeamTask, TreeDraft
from specsched.runtime.core.beams import beam_stream
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.wire import ProtocolError
from specsched.workers.beam_drafter import draft_tree

EMPTY = np.zeros(0, np.int32)


def run_beam_slot(worker, config: RunConfig, seq: int, local: int, slot: int, expect) -> None:
    """Draft `slot` of sequence `seq` until the verifier says done. `worker`: the DraftWorker (model, socket,
    recorder); `expect(sock, kinds)` waits for a message of one of those kinds."""
    cache = worker.model.new_cache()
    task: BeamTask | None = None
    rnd = 0
    while True:
        started = time.monotonic()
        if task is not None and task.context is not None:
            with worker.recorder.span("draft", seq):
                tree = draft_tree(worker.model, cache, task.context.tolist(), task.logprob, config.sampling,
                                  task.counts.tolist(), beam_stream(config.seed, local, slot, rnd))
            tokens, parents, sizes, q = tree.to_arrays()
        else:
            tokens, parents, sizes, q = EMPTY, EMPTY, EMPTY, None
        sent = time.monotonic()
        draft = TreeDraft(seq, worker.worker, slot, rnd, tokens, parents, sizes, q, sent, sent - started)
        worker.sock.send_multipart(draft.to_frames(), copy=False)
        task = BeamTask.from_message(expect(worker.sock, ("beam_task",)))
        if task.seq != seq or task.slot != slot or task.round != rnd + 1:
            raise ProtocolError(f"beam task for sequence {task.seq} slot {task.slot} round {task.round}, "
                                f"expected {seq} slot {slot} round {rnd + 1}")
        if not draft.empty:
            worker.recorder.add("queued", draft.sent_at, task.verify_start, seq)
            worker.recorder.add("verify", task.verify_start, task.verify_end, seq)
        worker.telemetry.events(worker.recorder.drain())
        rnd = task.round
        if task.done:
            return
