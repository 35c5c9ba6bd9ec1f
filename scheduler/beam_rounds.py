"""The verifier's desk for beam sequences: admit the slots' trees, run a round, answer every slot.

``Verifier`` hands beam work here (its own loop stays the same for every mode): ``admit`` files a
slot's tree and says when the round is complete (the sequence then enters the run queue as one ready
draft), ``run`` verifies a round in one target forward, commits what is final and returns each worker's
task and the slots that need a worker, ``join`` gives a vacant slot to the worker the engine sent.
beam_jobs.py holds the rules; this is the bookkeeping around them.

A beam worker that dies is restarted under the same worker id and a new *epoch* (runtime/engine/supervisor.py)
and asks where its slot stands (``resume``): the verifier holds every slot's beam, so it answers with the
slot's task for the round it waits for. What the dead process had sent for that round is dropped and drafted
again - the same tree, since a tree's draws come from the stream of its slot and round (``beam_stream``) and
its task is the same - and from then on only trees of the new epoch are filed. A new verifier, started when
one died, holds each sequence as the dead one last reported it (``BeamSequence.restore``), every slot's
epoch 0: each slot's worker, told to resync, asks it the same way.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.beam_messages import BeamTask, TreeDraft
from ..runtime.core.config import Mode
from ..runtime.core.transport import check_sender, worker_identity
from ..runtime.core.wire import ProtocolError
from .beam_jobs import BeamSequence, advance, parse_tree, settle_round, task, tasks
from .jobs import JobState


class BeamRounds:
    def __init__(self, target: LanguageModel) -> None:
        self.target = target
        self.seqs: dict[int, BeamSequence] = {}

    def add(self, job: JobState) -> None:
        """The job's beam sequences: from their prompts, or - re-announced to this verifier after another died -
        from where that one last reported them."""
        if job.config.beam_mode:
            beams = job.config.beam.width if job.config.mode == Mode.DSBD else 0
            for st in job.sequences:
                state = job.beam_states.get(st.local)
                self.seqs[st.seq] = BeamSequence.start(st, beams) if state is None else \
                    BeamSequence.restore(st, beams, state, self.target, job.config)

    def forget(self, job: JobState) -> None:
        for st in job.sequences:
            self.seqs.pop(st.seq, None)

    def admit(self, d: TreeDraft, reply_to: bytes, job: JobState) -> bool:
        """File a slot's tree (anything off is a ProtocolError); True when every slot's is in."""
        seq = self.seqs.get(d.seq)
        if seq is None or seq.st.done or job.config.mode != Mode.DSBD:
            raise ProtocolError(f"tree for sequence {d.seq}, which is not a running dsbd sequence")
        slots = seq.st.beam_workers
        if not 0 <= d.slot < len(slots) or d.worker != slots[d.slot]:
            raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot} from worker {d.worker}, not from its worker")
        check_sender(reply_to, d.worker, f"tree for sequence {d.seq} slot {d.slot}")
        if d.epoch != seq.epochs[d.slot]:
            raise ProtocolError(f"tree for sequence {d.seq} slot {d.slot} from epoch {d.epoch} of its worker, "
                                f"now {seq.epochs[d.slot]}")
        if d.round != seq.round or d.slot in seq.trees or d.slot not in seq.expected:
            raise ProtocolError(f"tree round {d.round} for sequence {d.seq} slot {d.slot}, expected {seq.round}")
        seq.trees[d.slot] = (d, reply_to, parse_tree(seq, d, job.config, self.target.vocab_size))
        return seq.complete

    def join(self, seq_id: int, slot: int, worker: int, reply_to: bytes, want: int, epoch: int) -> BeamTask:
        """The worker the engine sent for a vacant slot that holds a beam (`want`: the round the slot was asked
        for in): it takes the slot, and its task."""
        seq = self.seqs.get(seq_id)
        check_sender(reply_to, worker, f"beam_join for sequence {seq_id} slot {slot}")
        if seq is None or seq.st.done or seq.wanted.get(slot) != want:
            raise ProtocolError(f"beam_join for sequence {seq_id} slot {slot} from {reply_to!r}: not a slot "
                                f"waiting for a worker")
        return self._take(seq, slot, worker, epoch)

    def resume(self, seq_id: int, slot: int, worker: int, reply_to: bytes, want: int, epoch: int) -> BeamTask:
        """A restarted worker asks where the slot it served stands (`want`: the request it was sent to join
        by, -1 for none; `epoch`: its restarts so far). The slot's worker is re-primed: the slot's tree of the
        round is dropped, to be drafted again, and its task comes back; a join its predecessor never made is
        made; a slot it no longer holds (the width narrowed past it, the sequence finished) says done."""
        check_sender(reply_to, worker, "beam_resume")
        seq = self.seqs.get(seq_id)
        if seq is None or seq.st.done:  # finished, its job closed: nothing left to draft
            return BeamTask(seq_id, slot, seq.round if seq else 0, True, epoch=epoch)
        if not 0 <= slot < len(seq.st.beam_workers):
            raise ProtocolError(f"beam_resume for sequence {seq_id} slot {slot}, which it does not have")
        if seq.st.beam_workers[slot] == worker:
            if epoch <= seq.epochs[slot]:
                raise ProtocolError(f"beam_resume of sequence {seq_id} slot {slot} (epoch {epoch}): not the newest "
                                    f"incarnation of its worker")
            seq.trees.pop(slot, None)
            return self._take(seq, slot, worker, epoch)
        if want >= 0 and seq.wanted.get(slot) == want:
            return self._take(seq, slot, worker, epoch)
        return BeamTask(seq_id, slot, seq.round, True, epoch=epoch)

    def probe(self, seq_id: int, slot: int, worker: int, reply_to: bytes, epoch: int, probe: int) -> BeamTask | None:
        """A live worker that has waited --verdict-timeout since it sent its tree of round `probe`: its task
        again if that was lost (the round has moved on, or the slot was left: done), the round's task if its
        tree was lost (to draft the same tree again: its draws are keyed by the round), and nothing while its
        tree waits in the round. Changes nothing."""
        check_sender(reply_to, worker, "beam probe")
        seq = self.seqs.get(seq_id)
        if seq is None or seq.st.done or not 0 <= slot < len(seq.st.beam_workers) \
                or seq.st.beam_workers[slot] != worker:  # finished, or the width left the slot: the lost task said so
            return BeamTask(seq_id, slot, probe + 1, True, epoch=epoch, probe=probe)
        if epoch != seq.epochs[slot]:
            raise ProtocolError(f"beam probe of sequence {seq_id} slot {slot} from epoch {epoch}, "
                                f"now {seq.epochs[slot]}")
        if seq.round == probe and slot in seq.trees:
            return None
        return replace(task(seq, slot), probe=probe)

    @staticmethod
    def _take(seq: BeamSequence, slot: int, worker: int, epoch: int) -> BeamTask:
        seq.wanted.pop(slot, None)
        seq.st.beam_workers[slot], seq.epochs[slot] = worker, epoch
        return task(seq, slot)

    def nodes(self, seq_id: int) -> np.ndarray:
        """The round's draft tokens over every tree: what the run queue shows the policy as the draft."""
        trees = self.seqs[seq_id].trees.values()
        return np.concatenate([np.zeros(0, np.int32), *(d.tokens for d, _, _ in trees)]).astype(np.int32)

    def drafting(self, idle: set[int]) -> int:
        """Beam workers drafting now (or joining, to draft): expected trees that have not come in."""
        return sum(len(s.expected - s.trees.keys()) for s in self.seqs.values()
                   if s.st.beam_workers and s.counts is not None and not s.st.done and s.st.seq not in idle)

    def run(self, seq_id: int, job: JobState) -> tuple[list[int], list[tuple[bytes, int, BeamTask]], list[int], dict]:
        """Verify the round of `seq_id`: (tokens committed, [(reply-to, worker, task)], slots that want a
        worker, counts for the counters)."""
        seq = self.seqs[seq_id]
        t0 = time.monotonic()
        out = advance(seq, self.target, job.config)
        t1 = time.monotonic()
        drafted = sum(len(d.tokens) for d, _, _ in seq.trees.values())
        accepted = sum(step.width for step in out.steps[:out.layers_accepted])
        kept = settle_round(seq, out, job.config, self.target.eos_token_id)
        workers = list(seq.st.beam_workers)  # before tasks() vacates the slots past the width
        answers, want = tasks(seq, t0, t1)
        replies = [(worker_identity(workers[slot]), workers[slot], t) for slot, t in answers]
        seq.trees = {}
        return kept, replies, want, {"drafted": drafted, "accepted": accepted, "read": out.read, "seconds": t1 - t0}

    def result(self, job: JobState) -> dict:
        """Each finished sequence's beams (new tokens, cut after an end of sequence) and their joint
        log-probabilities (of every step taken), by index in the job."""
        out, eos = {}, self.target.eos_token_id
        for st in job.sequences:
            seq = self.seqs.get(st.seq)
            if seq is not None and seq.beams is not None:
                beams = [b[: b.index(eos) + 1] if eos in b else b for b in seq.beams]
                out[str(st.local)] = {"tokens": beams, "logprobs": [float(x) for x in seq.final_logprobs],
                                      "steps": len(seq.beams[0])}  # what each log-probability covers
        return out
