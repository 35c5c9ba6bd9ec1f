"""A beam worker's loop (dsbd): one draft process per beam slot of a sequence.

Each round the worker drafts the tree of the forest that grows from its slot's beam - as many nodes per
layer as the verifier's task says, from its own random stream keyed by (seed, sequence, slot, round) -
and sends it; the verdict is its next task. A worker that starts with the sequence sends an empty tree
first (round 0: no beam exists yet); one the engine sends later, when the width widens, joins
(``beam_join``) and is given its slot's beam at once; one restarted in place of a worker that died in the
slot asks the verifier where the slot stands (``beam_resume``) and drafts the round it waits for, into a
fresh cache. A task marked ``done`` - the sequence is finished, or the width narrowed past the slot - ends
the worker's part. The draft cache follows the slot's beam: ``sync_to`` keeps what the new beam shares
with the old one and reads the rest.
"""

from __future__ import annotations

import time

import numpy as np

from ..runtime.core.beam_messages import BeamTask, TreeDraft
from ..runtime.core.beams import beam_stream
from ..runtime.core.config import RunConfig
from ..runtime.core.wire import ProtocolError, pack
from .beam_drafter import draft_tree

EMPTY = np.zeros(0, np.int32)


def run_beam_slot(worker, config: RunConfig, seq: int, local: int, slot: int, how: str = "start", *,
                  epoch: int = 0, want: int = -1) -> None:
    """Draft `slot` of sequence `seq` until the verifier says done. `worker`: the DraftWorker (model, socket,
    recorder, ``expect_current``); `how`: start - the first task is earned by a round-0 tree; join - the slot
    is taken mid-sequence (the width widened; `want` names the verifier's request, by the round it was made
    in); resume - this process replaces one that died serving the slot (or sent to join it, `want`). The
    first task of a join or resume is asked for. `epoch`: this worker's restarts so far; a task of another
    epoch was meant for a dead predecessor and is skipped."""
    cache = worker.model.new_cache()
    task: BeamTask | None = None
    rnd = 0
    if how != "start":
        worker.sock.send_multipart(pack("beam_join" if how == "join" else "beam_resume", {
            "seq": seq, "worker": worker.worker, "slot": slot, "want": want, "epoch": epoch}))
        task = _answer(worker, seq, slot, epoch)
        if task.done:
            return
        rnd = task.round
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
        draft = TreeDraft(seq, worker.worker, slot, rnd, tokens, parents, sizes, q, sent, sent - started, epoch)
        worker.sock.send_multipart(draft.to_frames(), copy=False)
        task = _await_task(worker, seq, slot, rnd, epoch, config.supervision.verdict_timeout_s)
        if task.round == rnd and not task.done:
            continue  # the tree was lost on the way: the same tree again (its draws are keyed by the round)
        if not draft.empty:
            worker.recorder.add("queued", draft.sent_at, task.verify_start, seq)
            worker.recorder.add("verify", task.verify_start, task.verify_end, seq)
        worker.telemetry.events(worker.recorder.drain())
        rnd = task.round
        if task.done:
            return


def _await_task(worker, seq: int, slot: int, rnd: int, epoch: int, timeout: float) -> BeamTask:
    """The task that follows this slot's tree of round `rnd`. After each `timeout` seconds without one the worker
    probes (a ``beam_resume`` marked with the round: BeamRounds.probe): a lost task comes again, and a lost tree
    brings the round's own task back (round `rnd`), to be drafted again. A copy answering an earlier probe is
    skipped."""
    while True:
        msg = worker.expect_current(("beam_task",), epoch, timeout)
        if msg is None:
            worker.sock.send_multipart(pack("beam_resume", {"seq": seq, "worker": worker.worker, "slot": slot,
                                                            "want": -1, "epoch": epoch, "probe": rnd}))
            continue
        task = BeamTask.from_message(msg)
        if (task.seq, task.slot) != (seq, slot):  # an answer to a probe this process made in an earlier part
            continue
        if task.done or task.round == rnd + 1 or (task.round == rnd and task.probe == rnd):
            return task


def _answer(worker, seq: int, slot: int, epoch: int) -> BeamTask:
    """The verifier's answer to a join or a resume, checked to be this slot's; answers to probes made before
    (in this slot or another) are skipped."""
    while True:
        task = BeamTask.from_message(worker.expect_current(("beam_task",), epoch))
        if task.probe >= 0:
            continue
        if (task.seq, task.slot) != (seq, slot):
            raise ProtocolError(f"beam task for sequence {task.seq} slot {task.slot}, expected {seq} slot {slot}")
        return task
