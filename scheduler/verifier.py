"""The target-verifier process: pick (policy) -> verify (target model) -> reply (verdict).

One loop, like an OS dispatcher: drain arrived drafts into the run queue, let the policy pick (with
--lockstep only once every worker that owes a draft has one queued), run one target forward over the
prefix's unread tokens plus the draft, decide acceptance, send the verdict back to the worker and
the committed tokens to the supervisor.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import zmq

from specsched.policies.base import Policy, PolicySettings
from specsched.policies.loader import load_policy
from specsched.runtime.config import RunConfig
from specsched.runtime.events import VERIFIER, Recorder
from specsched.runtime.messages import Draft, Verdict
from specsched.runtime.sampling import stream
from specsched.runtime.transport import Telemetry, worker_identity
from specsched.runtime.wire import ProtocolError, pack, unpack
from specsched.scheduler.acceptance import verify_tree
from specsched.scheduler.run_queue import PolicyFailure, Queued, RunQueue
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
    batched_drafts: int = 0      # drafts verified; / verifications = mean batch size


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


def start_policy(config: RunConfig) -> Policy:
    """Load and construct the run's policy; a constructor that raises stops the run naming it."""
    policy_cls = load_policy(config.policy)
    name = policy_cls.name or policy_cls.__name__
    try:
        policy = policy_cls(PolicySettings(max_batch=config.max_batch))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a policy must not end the verifier silently
        raise PolicyFailure(f"policy {name!r} failed to start: {type(exc).__name__}: {exc}") from exc
    if not isinstance(getattr(policy, "settings", None), PolicySettings):
        raise PolicyFailure(f"policy {name!r} has no settings: its __init__ must call super().__init__(settings)")
    return policy


class Verifier:
    def __init__(self, config: RunConfig, target: LanguageModel, telemetry: Telemetry) -> None:
        self.config = config
        self.target = target
        self.telemetry = telemetry
        self.recorder = Recorder("verifier", VERIFIER)
        self.seqs: dict[int, SequenceState] = {}
        self.counters = Counters()
        self.queue = RunQueue(start_policy(config))

    def unfinished(self) -> int:
        """Sequences not done yet; one whose first draft has not arrived counts as unfinished."""
        return self.config.n_sequences - sum(st.done for st in self.seqs.values())

    def owing_workers(self) -> int:
        """Draft workers that still owe the verifier a draft. In seed mode every worker owns one
        sequence, so one per unfinished sequence; in sd mode the single worker drafts its sequences
        one after another and never has more than one draft outstanding."""
        unfinished = self.unfinished()
        return unfinished if self.config.mode == "seed" else min(unfinished, 1)

    def ready_to_pick(self) -> bool:
        """Whether to ask the policy now: something is queued and, under --lockstep, every worker that
        owes a draft has one queued, so the policy sees the whole step (one per live sequence).

        Never a deadlock: a worker that owes a draft and has none queued is drafting one, and a
        finished sequence stops being owed.
        """
        n = len(self.queue)
        return n > 0 and (not self.config.lockstep or n >= self.owing_workers())

    def ready_since(self) -> float:
        """When the queue became ready: its oldest arrival, or under --lockstep the arrival that
        completed the step (the newest; until then the verifier was waiting, not working)."""
        return self.queue.newest_arrival if self.config.lockstep else self.queue.oldest_arrival

    def admit(self, draft: Draft, reply_to: bytes, arrival: float) -> None:
        """Validate a draft and put it in the run queue; anything off is a ProtocolError (counted).

        A draft must come from the worker that owns its sequence (by ZeroMQ identity), for a
        sequence of this run, for the round the verifier expects next, and at most one per sequence
        may wait - so a stray or forged message can never take a sequence's turn.
        """
        if not 0 <= draft.seq < self.config.n_sequences:
            raise ProtocolError(f"draft for sequence {draft.seq}, which is not part of this run")
        owner = draft.seq if self.config.mode == "seed" else 0
        if draft.worker != owner or reply_to != worker_identity(owner):
            raise ProtocolError(f"draft for sequence {draft.seq} from {reply_to!r}, not from its worker {owner}")
        st = self.seqs.get(draft.seq)
        if st is None:
            if draft.prompt is None or len(draft.prompt) == 0:
                raise ProtocolError(f"first draft of sequence {draft.seq} carries no prompt")
            st = SequenceState(draft.seq, draft.prompt.tolist(), self.target.new_cache(),
                               stream(self.config.seed, draft.seq, "verify"))
            self.seqs[draft.seq] = st
        if st.done:
            raise ProtocolError(f"draft for finished sequence {draft.seq}")
        if draft.round != st.rounds or draft.seq in self.queue.sequences():
            raise ProtocolError(f"draft round {draft.round} for sequence {draft.seq}, expected {st.rounds}")
        if not self.config.sampling.greedy:
            if draft.q is None or draft.q.shape[1] != self.target.vocab_size:
                raise ProtocolError(f"sampled draft for sequence {draft.seq} lacks a valid q")
        self.queue.push(draft, reply_to, arrival=arrival, verified_tokens=len(st.generated),
                        priority=self.config.priority_of(draft.worker), round=st.rounds)

    def verify(self, entries: list[Queued]) -> list[Verdict]:
        """Verify the picked drafts in one target forward (a batch when the policy picked several).

        Each draft is read after its sequence's unread tokens as a tree: token j attends to the
        prefix and its own ancestors, at position prefix length + depth. Afterwards the cache keeps
        only the accepted path, so the prefix is never recomputed.
        """
        t0 = time.monotonic()
        states = [self.seqs[e.draft.seq] for e in entries]
        inputs = [self._layout(st, e.draft) for st, e in zip(states, entries)]
        caches = [st.cache for st in states]
        if len(entries) == 1:
            logits = [self.target.forward(caches[0], inputs[0][0], inputs[0][1])]
        else:
            logits = self.target.forward_batch(caches, [i[0] for i in inputs], [i[1] for i in inputs])
        t1 = time.monotonic()
        verdicts, resampled = [], False
        for st, e, (_, _, n_unread, base), rows in zip(states, entries, inputs, logits):
            d = e.draft
            outcome = verify_tree(rows[n_unread - 1], rows[n_unread:], d.tokens, d.parents, d.q,
                                  self.config.sampling, st.rng)
            self.target.keep(st.cache, [*range(base), *(base + j for j in outcome.path)])
            kept = commit(st, outcome.tokens, self.target.eos_token_id, self.config.max_new_tokens)
            resampled |= outcome.resampled
            st.rounds += 1
            c = self.counters
            c.drafted += len(d.tokens)
            c.accepted += outcome.accepted
            c.committed += len(kept)
            verdicts.append(Verdict(d.seq, d.round, outcome.accepted, np.asarray(kept, np.int32),
                                    np.asarray(outcome.path, np.int32), st.done, t0, 0.0))
        self.counters.verifications += 1
        self.counters.batched_drafts += len(entries)
        t2 = time.monotonic()
        seq = entries[0].draft.seq if len(entries) == 1 else -1
        if resampled:
            self.recorder.add("verify", t0, t1, seq)
            self.recorder.add("resample", t1, t2, seq)
        else:
            self.recorder.add("verify", t0, t2, seq)
        for v in verdicts:
            v.verify_end = t2
        return verdicts

    def _layout(self, st: SequenceState, d: Draft) -> tuple[list[int], list[int] | None, int, int]:
        """Tokens to read (unread prefix + draft), their absolute parents (None = plain sequence),
        how many are unread prefix, and the cache index of the draft's first token."""
        unread = self.target.sync_to(st.cache, st.context)
        base = len(st.cache) + len(unread)
        tokens = unread + d.tokens.tolist()
        if np.array_equal(d.parents, np.arange(-1, len(d.tokens) - 1)):
            return tokens, None, len(unread), base
        parents = [len(st.cache) + i - 1 for i in range(len(unread))]
        parents += [base + int(p) if p >= 0 else base - 1 for p in d.parents]
        return tokens, parents, len(unread), base

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
    idle_since = time.monotonic()
    while v.unfinished():
        if not parent_alive():
            break
        # short polls, also while --lockstep holds a partial step: a dead supervisor still ends the loop
        if not v.ready_to_pick() and not router.poll(100):
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
        if not v.ready_to_pick():
            continue
        v.recorder.add("idle", idle_since, v.ready_since())
        picked = v.queue.pick()
        for entry, verdict in zip(picked, v.verify(picked)):
            v.report(verdict, entry.draft.worker)  # the supervisor hears of it before the worker does
            router.send_multipart([entry.reply_to, *verdict.to_frames()], copy=False)
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
