"""The draft-worker process: draft, enqueue, wait for the verdict, roll back, repeat.

In ``seed`` mode each worker owns one sequence (one thought); in ``sd`` mode a single worker runs
every sequence one after another, which is plain serial speculative decoding.
"""

from __future__ import annotations

import time

import numpy as np
import zmq

from specsched.runtime.config import RunConfig
from specsched.runtime.events import Recorder
from specsched.runtime.messages import Draft, Verdict
from specsched.runtime.sampling import stream
from specsched.runtime.transport import Telemetry, worker_identity
from specsched.runtime.wire import ProtocolError, pack, unpack
from specsched.workers.backend import LanguageModel
from specsched.workers.drafter import make_drafter


class Stopped(Exception):
    """The supervisor went away: stop quietly."""


def serve(config: RunConfig, model: LanguageModel, worker: int, sequences: list[tuple[int, list[int]]],
          ctx: zmq.Context, endpoint: str, telemetry: Telemetry, parent_alive) -> None:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, worker_identity(worker))
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(endpoint)
    sock.send_multipart(pack("hello", {"worker": worker}))
    try:
        _expect(sock, "start", parent_alive)
        recorder = Recorder("draft", worker)
        for seq, prompt in sequences:
            _run_sequence(config, model, worker, seq, prompt, sock, recorder, telemetry, parent_alive)
    except Stopped:
        pass
    finally:
        sock.close()


def _run_sequence(config: RunConfig, model: LanguageModel, worker: int, seq: int, prompt: list[int],
                  sock: zmq.Socket, recorder: Recorder, telemetry: Telemetry, parent_alive) -> None:
    drafter = make_drafter(model, config.sampling, stream(config.seed, seq, "draft"), prompt,
                           k_config=config.tree_shape, replacement=config.replacement, lookup=config.draft_lookup,
                           min_confidence=config.min_confidence)
    generated, rnd = 0, 0
    while True:
        # never draft deeper than the token limit allows: a verdict adds one target token after the draft
        budget = config.max_new_tokens - generated - 1
        with recorder.span("draft", seq):
            proposal = drafter.propose(budget)
        draft = Draft(seq, worker, rnd, proposal.tokens, proposal.parents, proposal.q,
                      prompt=np.asarray(prompt, np.int32) if rnd == 0 else None, sent_at=time.monotonic())
        sock.send_multipart(draft.to_frames(), copy=False)
        verdict = Verdict.from_message(_expect(sock, "verdict", parent_alive))
        if verdict.seq != seq or verdict.round != rnd:
            raise ProtocolError(f"verdict for sequence {verdict.seq} round {verdict.round}, "
                                f"expected {seq} round {rnd}")
        recorder.add("queued", draft.sent_at, verdict.verify_start, seq)
        recorder.add("verify", verdict.verify_start, verdict.verify_end, seq)
        committed = verdict.tokens.tolist()
        drafter.observe(committed, verdict.path.tolist())
        generated += len(committed)
        rnd += 1
        telemetry.events(recorder.drain())
        if verdict.done:
            return


def _expect(sock: zmq.Socket, kind: str, parent_alive):
    while not sock.poll(100):
        if not parent_alive():
            raise Stopped
    msg = unpack(sock.recv_multipart(copy=False))
    if msg.kind != kind:
        raise ProtocolError(f"expected {kind!r}, got {msg.kind!r}")
    return msg
