"""The draft-worker process: wait for an assignment, then draft, enqueue, wait for the verdict, roll back.

A worker lives as long as the engine keeps it: it loads its draft model once, says ``ready``, and then
serves assignments from the engine's control socket - one sequence (a thought, in ``seed`` mode) or a
job's sequences one after another (``sd``: serial speculative decoding). After each assignment it says
``idle`` and waits, parked, for the next one, or for ``stop``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.calibration import Calibration
from ..runtime.core.config import Mode, RunConfig, TreeKind
from ..runtime.core.costs import CostCurve
from ..runtime.core.events import Recorder
from ..runtime.core.messages import Draft, Verdict
from ..runtime.core.resume import Resume, Resumed
from ..runtime.core.sampling import stream
from ..runtime.core.security import Keys
from ..runtime.core.transport import Telemetry, connect, process_name, worker_identity
from ..runtime.core.wire import ProtocolError, pack, unpack
from .beam_worker import run_beam_slot
from .branch_drafter import branch_drafter
from .drafter_choice import make_drafter


class Stopped(Exception):
    """The engine went away: stop quietly."""


class Resync(Exception):
    """The verifier was restarted (runtime/engine/supervisor.py): resume the assignment under a new epoch."""

    def __init__(self, epoch: int) -> None:
        super().__init__(f"resync to epoch {epoch}")
        self.epoch = epoch


class DraftWorker:
    """One draft worker: its model, its socket to the verifier (a DEALER named ``w<id>``), its events."""

    def __init__(self, model: LanguageModel | None, worker: int, verify: zmq.Socket, telemetry: Telemetry,
                 parent_alive=lambda: True, *, load: Callable[[], LanguageModel] | None = None,
                 vocab: int | None = None) -> None:
        if model is None and (load is None or vocab is None):
            raise ValueError("a draft worker without a model needs a way to load one and the vocabulary's size")
        self._model, self._load, self._vocab = model, load, vocab
        self.worker, self.sock = worker, verify
        self.telemetry, self.parent_alive = telemetry, parent_alive
        self.control: zmq.Socket | None = None   # the engine's: resync or stop may come while drafting
        self.recorder = Recorder("draft", worker)
        self.retitle = lambda job: None  # the process's name for `ps` (job id, or None when parked)
        self.placed: dict = {}           # where its model was placed (device, --device asked), said with ready
        # PCT's calibration bins, kept over every sequence this worker drafts (greedy and sampled judge
        # acceptance differently, so apart): one 32-token sequence barely fills a bin
        self.calibrations: dict[bool, Calibration] = {}

    @classmethod
    def connect(cls, model: LanguageModel | None, worker: int, ctx: zmq.Context, endpoint: str,
                telemetry: Telemetry, parent_alive, keys: Keys | None = None, **lazily) -> DraftWorker:
        logical = worker_identity(worker).decode()
        identity = keys.routing_id(logical, process_name("draft", worker)) if keys else logical
        sock = connect(ctx, zmq.DEALER, endpoint, keys, identity=identity, linger_ms=1000)
        return cls(model, worker, sock, telemetry, parent_alive, **lazily)

    @property
    def model(self) -> LanguageModel:
        """The draft model, loaded on first use: a worker that only serves Self-Draft jobs (`--drafter
        branches`, where the target drafts for itself) never loads one."""
        if self._model is None:
            self._model = self._load()
        return self._model

    @property
    def vocab(self) -> int:
        return self._model.vocab_size if self._model is not None else self._vocab

    def serve(self, control: zmq.Socket) -> None:
        """Assignments until ``stop``: each is (config, [(sequence id, index in its job, prompt, beam slot
        [, how: start | join - a dsbd slot taken mid-sequence | resume - after a restart[, want]]), ...],
        epoch)."""
        # ready only once the verifier has answered: a first draft must not wait for a connection to form
        # (as SEED's start barrier, per worker: the engine starts a job once all its workers are ready)
        try:
            self.greet()
        except Stopped:
            return
        control.send_multipart(pack("ready", {"role": "draft", "worker": self.worker, **self.placed}))  # reachable now
        self.control = control
        try:
            while True:
                msg = _expect(control, ("assign", "stop", "resync"), self.parent_alive)
                if msg.kind == "stop":
                    return
                if msg.kind == "resync":  # late: this assignment had ended before the verifier was restarted
                    continue
                config, job = RunConfig.from_dict(msg.fields["config"]), int(msg.fields["job"])
                self.retitle(job)
                self.run_assignment(config, [list(e) for e in msg.fields["sequences"]], int(msg.fields.get("epoch", 0)))
                self.telemetry.send("idle", {"worker": self.worker, "job": job})
                self.retitle(None)
        except Stopped:
            pass
        finally:
            self.sock.close()

    def greet(self) -> None:
        """hello until welcome. Said again each second: a verifier that died meanwhile never answered, and its
        successor binds the same endpoint. A restarted worker has its predecessor's identity, so the
        verifier's answers to the dead one may come first: skipped."""
        while True:
            self.sock.send_multipart(pack("hello", {"worker": self.worker}))
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if self.sock.poll(100):
                    if unpack(self.sock.recv_multipart(copy=False)).kind == "welcome":
                        return
                elif not self.parent_alive():
                    raise Stopped

    def run_assignment(self, config: RunConfig, entries: list[list], epoch: int) -> None:
        """Each (sequence id, index in its job, prompt, beam slot[, how[, want]]) in turn; how: start | join (a
        dsbd slot taken mid-sequence, `want`: the verifier's request it answers) | resume (after a restart).
        A resync - the verifier was restarted - resumes them all under the new epoch."""
        finished = 0
        while finished < len(entries):
            try:
                for seq, local, prompt, slot, *how in entries[finished:]:
                    how, want = (how[0] if how else "start"), (int(how[1]) if len(how) > 1 else -1)
                    if config.mode == Mode.DSBD:
                        run_beam_slot(self, config, int(seq), int(local), int(slot), how, epoch=epoch, want=want)
                    else:
                        self.run_sequence(config, int(seq), int(local), [int(t) for t in prompt],
                                          resume=how == "resume", epoch=epoch)
                    finished += 1
            except Resync as r:  # every entry resumes: the new verifier answers done for the finished ones
                epoch, finished = r.epoch, 0
                entries = [[*e[:4], "resume", *e[5:]] for e in entries]

    def expect_current(self, kinds: tuple[str, ...], epoch: int, timeout: float | None = None):
        """As ``expect``, skipping answers meant for an earlier epoch: what a dead verifier, or a verifier
        answering this process's dead predecessor, sent and this process reads only now. None after
        `timeout` seconds without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            msg = self.expect(("verdict", "resumed", "beam_task"), deadline)
            if msg is None:
                return None
            if int(msg.fields.get("epoch", 0)) == epoch:
                if msg.kind not in kinds:
                    raise ProtocolError(f"expected {' or '.join(map(repr, kinds))}, got {msg.kind!r}")
                return msg

    def expect(self, kinds: tuple[str, ...], deadline: float | None = None):
        """The verifier's next message, of one of `kinds` (None once time.monotonic() passes `deadline`);
        meanwhile the engine may say resync (raises Resync) or stop (raises Stopped)."""
        while not self.sock.poll(_poll_ms(deadline)):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            if self.control is not None and self.control.poll(0):
                msg = unpack(self.control.recv_multipart(copy=False))
                if msg.kind == "resync":
                    raise Resync(int(msg.fields["epoch"]))
                if msg.kind == "stop":
                    raise Stopped
                raise ProtocolError(f"unexpected {msg.kind!r} from the engine while drafting")
            if not self.parent_alive():
                raise Stopped
        msg = unpack(self.sock.recv_multipart(copy=False))
        if msg.kind == "welcome":  # the answer to a hello said twice (greet): nothing to act on
            return self.expect(kinds, deadline)
        if msg.kind not in kinds:
            raise ProtocolError(f"expected {' or '.join(map(repr, kinds))}, got {msg.kind!r}")
        return msg

    def run_sequence(self, config: RunConfig, seq: int, local: int, prompt: list[int], *, resume: bool = False,
                     epoch: int = 0) -> None:
        """Draft `seq` until the verifier says it is done. Its random draws are keyed by the job's seed, the
        sequence's index in its job and its position, never by what this worker did before. `resume`: this process
        replaces one that died; it asks the verifier for the verified context and round and drafts on. A
        verdict lost on the way (await_verdict) is taken up the same way."""
        where = None
        if resume:
            self.sock.send_multipart(Resume(seq, self.worker, epoch).to_frames())
            while where is None or where.probe >= 0:  # an answer to a probe about an earlier sequence: stale
                where = Resumed.from_message(self.expect_current(("resumed",), epoch))
        while True:
            if where is not None and where.seq != seq:
                raise ProtocolError(f"resumed sequence {where.seq}, expected {seq}")
            if where is not None and where.done:
                return
            where = self.draft_from(config, seq, local, prompt, where, epoch)
            if where is None:
                return

    def draft_from(self, config: RunConfig, seq: int, local: int, prompt: list[int], where: Resumed | None,
                   epoch: int) -> Resumed | None:
        """Draft `seq` from the prompt, or from where the verifier says it stands, until a verdict says done
        (returns None) or a verdict was lost (returns where the sequence stands now)."""
        generated, rnd, context = 0, 0, prompt
        if where is not None:
            context = where.context.tolist()
            generated, rnd = len(context) - len(prompt), where.round
        def model_drafter():
            return make_drafter(self.model, config.sampling, stream(config.seed, local, "draft", generated), context,
                                k_config=config.shape.widths, replacement=config.shape.replacement,
                                lookup=config.draft_lookup, min_confidence=config.shape.min_confidence,
                                pct=(config.shape.pct_top_k, config.shape.pct_depth, config.shape.pct_floor)
                                if config.shape.tree == TreeKind.PCT else None,
                                calibration=self.calibrations.setdefault(config.sampling.greedy, Calibration()),
                                clocks=(config.seed, local))

        # --drafter model | branches | both: the draft model's tree, Self-Draft's lanes and caches, or both
        drafter = branch_drafter(config, model_drafter, context, self.vocab)
        try:
            while True:
                # never draft deeper than the token limit allows: a verdict adds one target token after the draft
                budget = config.max_new_tokens - generated - 1
                started = time.monotonic()
                drafter.rng = stream(config.seed, local, "draft", generated)  # keyed by position, as the verifier's
                with self.recorder.span("draft", seq):
                    proposal = drafter.propose(budget)
                sent = time.monotonic()
                draft = Draft(seq, self.worker, rnd, proposal.tokens, proposal.parents, proposal.q,
                              sent_at=sent, conf=proposal.conf, draft_s=sent - started, epoch=epoch,
                              lanes=proposal.lanes, held=drafter.features_held())
                frames = draft.to_frames()
                self.sock.send_multipart(frames, copy=False)
                verdict = self.await_verdict(frames, seq, rnd, epoch, config.supervision.verdict_timeout_s)
                if isinstance(verdict, Resumed):
                    return verdict
                if verdict.seq != seq or verdict.round != rnd:
                    raise ProtocolError(f"verdict for sequence {verdict.seq} round {verdict.round}, "
                                        f"expected {seq} round {rnd}")
                # waited from its sending; in the run queue from the verifier's own stamp (osmetrics.py: bypasses)
                self.recorder.add("queued", draft.sent_at, verdict.verify_start, seq, admitted=verdict.admitted or None)
                self.recorder.add("verify", verdict.verify_start, verdict.verify_end, seq)
                committed = verdict.tokens.tolist()
                if verdict.features is not None:
                    drafter.take_features(verdict.features_from, verdict.features)
                drafter.observe(committed, verdict.path.tolist(), verdict.aside,
                                None if verdict.predictions is None else verdict.predictions.tolist())
                drafter.hear(CostCurve.from_list(verdict.cost), verdict.queue)
                generated += len(committed)
                rnd += 1
                self.telemetry.events(self.recorder.drain())
                if verdict.done:
                    return None
        finally:
            drafter.close()  # its lane processes, if any (--branch-processes)

    def await_verdict(self, frames: list, seq: int, rnd: int, epoch: int, timeout: float) -> Verdict | Resumed:
        """The verdict on round `rnd` of `seq`. After each `timeout` seconds without one the worker probes
        (runtime/core/resume.py): a draft still queued is waited for (a policy may hold it back for long), a
        draft lost on the way is sent again (`frames`), and a lost verdict returns where the sequence stands.
        An answer to an earlier round's probe is stale and skipped."""
        while True:
            msg = self.expect_current(("verdict", "resumed"), epoch, timeout)
            if msg is None:
                self.sock.send_multipart(Resume(seq, self.worker, epoch, probe=rnd).to_frames())
            elif msg.kind == "verdict":
                return Verdict.from_message(msg)
            else:
                where = Resumed.from_message(msg)
                if where.probe != rnd or where.seq != seq or where.queued:  # stale; or queued, or riding aside
                    continue                                              # (its verdict held): wait on
                if where.done or where.round > rnd:
                    return where
                self.sock.send_multipart(frames, copy=False)


def _poll_ms(deadline: float | None) -> int:
    """A wait short enough to see the engine and a dead parent (100 ms), and not to overrun `deadline`."""
    return 100 if deadline is None else max(0, min(100, int(1000 * (deadline - time.monotonic()))))


def _expect(sock: zmq.Socket, kinds: tuple[str, ...], parent_alive):
    while not sock.poll(100):
        if not parent_alive():
            raise Stopped
    msg = unpack(sock.recv_multipart(copy=False))
    if msg.kind not in kinds:
        raise ProtocolError(f"expected {' or '.join(map(repr, kinds))}, got {msg.kind!r}")
    return msg


__all__ = ["DraftWorker", "Stopped"]
