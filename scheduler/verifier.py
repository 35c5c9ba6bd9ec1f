"""The target-verifier process: pick (policy) -> verify (target model) -> reply (verdict).

One loop, like an OS dispatcher: drain arrived drafts into the run queue, let the policy pick, run
one target forward over the prefix's unread tokens plus the draft, decide acceptance, send the
verdict back to the worker and the committed tokens to the supervisor.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import zmq

from specsched.policies.base import PolicySettings
from specsched.policies.loader import load_policy
from specsched.runtime.config import RunConfig
from specsched.runtime.events import VERIFIER, Recorder
from specsched.runtime.messages import Draft, Verdict
from specsched.runtime.sampling import stream
from specsched.runtime.transport import Telemetry
from specsched.runtime.wire import ProtocolError, pack, unpack
from specsched.scheduler.acceptance import verify_chain
from specsched.scheduler.run_queue import Queued, RunQueue
from specsched.workers.backend import Cache, LanguageModel


@dataclass(slots=True)
class SequenceState:
    seq: int
    prompt: list[int]
    cache: Cache
    rng: np.random.Generator
    generated: list[int] = field(default_factory=list)
    rounds: int = 0
    done: bool = False

    @property
    def context(self) -> list[int]:
        return self.prompt + self.generated


@dataclass(slots=True)
class Counters:
    verifications: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    rejected_messages: int = 0


def commit(st: SequenceState, tokens: list[int], eos: int | None, limit: int) -> list[int]:
    """Append verified tokens, stopping at EOS (kept) or at the token limit. Returns what was kept."""
    kept = []
    for t in tokens:
        if len(st.generated) >= limit:
            break
        st.generated.append(t)
        kept.append(t)
        if t == eos:
            break
    st.done = len(st.generated) >= limit or (eos is not None and bool(kept) and kept[-1] == eos)
    return kept


class Verifier:
    def __init__(self, config: RunConfig, target: LanguageModel, telemetry: Telemetry) -> None:
        self.config = config
        self.target = target
        self.telemetry = telemetry
        self.recorder = Recorder("verifier", VERIFIER)
        self.seqs: dict[int, SequenceState] = {}
        self.counters = Counters()
        policy_cls = load_policy(config.policy)
        self.queue = RunQueue(policy_cls(PolicySettings(max_batch=1)))

    def admit(self, draft: Draft, reply_to: bytes, arrival: float) -> None:
        st = self.seqs.get(draft.seq)
        if st is None:
            if draft.prompt is None or len(draft.prompt) == 0:
                raise ProtocolError(f"first draft of sequence {draft.seq} carries no prompt")
            st = SequenceState(draft.seq, draft.prompt.tolist(), self.target.new_cache(),
                               stream(self.config.seed, draft.seq, "verify"))
            self.seqs[draft.seq] = st
        if st.done:
            raise ProtocolError(f"draft for finished sequence {draft.seq}")
        if not self.config.sampling.greedy:
            if draft.q is None or draft.q.shape[1] != self.target.vocab_size:
                raise ProtocolError(f"sampled draft for sequence {draft.seq} lacks a valid q")
        self.queue.push(draft, reply_to, arrival=arrival, verified_tokens=len(st.generated),
                        priority=self.config.priority_of(draft.worker), round=st.rounds)

    def verify(self, entry: Queued) -> Verdict:
        d = entry.draft
        st = self.seqs[d.seq]
        t0 = time.monotonic()
        unread = self.target.sync_to(st.cache, st.context)
        logits = self.target.forward(st.cache, unread + d.tokens.tolist())
        rows = logits[len(unread) - 1:]  # row i predicts draft position i; the last row, the bonus
        t1 = time.monotonic()
        outcome = verify_chain(rows, d.tokens, d.q, self.config.sampling, st.rng)
        kept = commit(st, outcome.tokens, self.target.eos_token_id, self.config.max_new_tokens)
        t2 = time.monotonic()
        if outcome.resampled:
            self.recorder.add("verify", t0, t1, d.seq)
            self.recorder.add("resample", t1, t2, d.seq)
        else:
            self.recorder.add("verify", t0, t2, d.seq)
        st.rounds += 1
        c = self.counters
        c.verifications += 1
        c.drafted += len(d.tokens)
        c.accepted += outcome.accepted
        c.committed += len(kept)
        return Verdict(d.seq, d.round, outcome.accepted, np.asarray(kept, np.int32),
                       np.asarray(outcome.path, np.int32), st.done, t0, t2)

    def report(self, verdict: Verdict, worker: int) -> None:
        self.telemetry.send("commit", {"seq": verdict.seq, "worker": worker, "done": verdict.done},
                            {"tokens": verdict.tokens})
        self.telemetry.events(self.recorder.drain())


def serve(config: RunConfig, target: LanguageModel, ctx: zmq.Context, endpoint: str,
          telemetry: Telemetry, n_workers: int, parent_alive) -> Counters:
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 1000)
    router.bind(endpoint)
    v = Verifier(config, target, telemetry)
    _start_barrier(router, n_workers, parent_alive, v.counters)
    n_seqs = config.n_sequences
    idle_since = time.monotonic()
    while sum(st.done for st in v.seqs.values()) < n_seqs:
        if not parent_alive():
            break
        if not len(v.queue) and not router.poll(100):
            continue
        while router.poll(0):  # drain every arrived message into the run queue
            frames = router.recv_multipart(copy=False)
            now = time.monotonic()
            try:
                msg = unpack(frames[1:])
                if msg.kind != "draft":
                    raise ProtocolError(f"unexpected {msg.kind!r} message")
                v.admit(Draft.from_message(msg), frames[0].bytes, now)
            except (ProtocolError, KeyError, TypeError, ValueError) as exc:
                v.counters.rejected_messages += 1
                print(f"verifier: rejected message: {exc}", file=sys.stderr)
        if not len(v.queue):
            continue
        v.recorder.add("idle", idle_since, v.queue._waiting[0].info.arrival)
        for entry in v.queue.pick():
            verdict = v.verify(entry)
            router.send_multipart([entry.reply_to, *verdict.to_frames()], copy=False)
            v.report(verdict, entry.draft.worker)
        idle_since = time.monotonic()
    router.close()
    return v.counters


def _start_barrier(router: zmq.Socket, n_workers: int, parent_alive, counters: Counters) -> None:
    """Wait until every worker has loaded its model, then start them together (SEED Fig. 3a)."""
    ready: list[bytes] = []
    while len(ready) < n_workers and parent_alive():
        if not router.poll(100):
            continue
        frames = router.recv_multipart(copy=False)
        try:
            if unpack(frames[1:]).kind == "hello":
                ready.append(frames[0].bytes)
                continue
            raise ProtocolError("expected hello")
        except ProtocolError as exc:
            counters.rejected_messages += 1
            print(f"verifier: rejected message before start: {exc}", file=sys.stderr)
    for identity in ready:
        router.send_multipart([identity, *pack("start")])
