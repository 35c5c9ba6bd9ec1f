"""Decoding in process: one sequence through the real DraftWorker and the real Verifier, with a loopback
socket between them instead of processes and ZeroMQ."""

from __future__ import annotations

import time

from specsched.runtime.backends.backend import get_backend
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.wire import unpack
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier
from specsched.workers.draft_worker import DraftWorker


class NoTelemetry:
    def send(self, *args, **kwargs):
        pass

    def events(self, rows):
        pass


class LoopbackSocket:
    """Stands in for a worker's DEALER: every draft sent is verified at once by an in-process Verifier."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self.reply: list | None = None

    def send_multipart(self, frames, copy=True) -> None:
        draft = Draft.from_message(unpack([bytes(f) for f in frames]))
        self.verifier.admit(draft, b"w0", time.monotonic())
        (reply,) = self.verifier.verify(self.verifier.queue.pick())
        self.reply = reply.verdict.to_frames()

    def poll(self, timeout=None) -> bool:
        return self.reply is not None

    def recv_multipart(self, copy=True) -> list[bytes]:
        frames, self.reply = [bytes(f) for f in self.reply], None
        return frames


def decode_in_process(config: RunConfig, prompt: list[int], seq: int) -> list[int]:
    """One sequence through the real DraftWorker and the real Verifier, without processes or sockets.

    Same per-sequence RNG streams as the runtime (keyed by the seed and the sequence's index in its job),
    so the output equals that of `sd` and `seed` runs.
    """
    config = config.replace(mode="sd", workers=seq + 1, prompts=[], sim_draft_ms=0.0, sim_verify_ms=0.0)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), NoTelemetry())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[seq, seq, 0, list(prompt)]]}, verifier.target))
    worker = DraftWorker(backend.draft(), 0, LoopbackSocket(verifier), NoTelemetry())
    worker.run_sequence(config, seq, seq, list(prompt))
    return verifier.seqs[seq].generated
