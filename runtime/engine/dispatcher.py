"""The engine's thread: it owns every socket and the process table, and moves jobs along.

One loop, like a kernel's: take submissions and cancellations (woken through a pipe), hear the children
(reports.py), notice the dead and restart what can resume (supervisor.py), admit pending jobs and retire
idle workers (admission.py), refresh the live views. How a job ends - complete, failed, cancelled, or at
shutdown - is endings.py; workers from other hosts, joining.py; the start, held until the engine's checks
pass, held_start.py.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
import time

import zmq

from ..backends.backend import preload_modules
from ..core.config import ConfigError, RunConfig
from ..core.gatekeeper import Gatekeeper
from ..core.security import Keys, secure_server
from ..core.transport import make_endpoints, private_dir
from ..core.wire import pack
from .admission import Admission
from .endings import Endings
from .held_start import HeldStart
from .jobs import JobRun, Phase
from .joining import Joining
from .process_table import Child, ProcessTable
from .reports import Reports
from .supervisor import Intensity, Supervision

TICK_S = 0.1          # longest wait between two looks at the children and the views
DRAIN_MAX = 1000      # telemetry messages read per turn of the loop


class Dispatcher(HeldStart, Admission, Reports, Supervision, Joining, Endings):
    def __init__(self, config: RunConfig, finish, *, max_workers: int, idle_timeout_s: float,
                 keys: Keys | None = None) -> None:
        """It starts held: the sockets are bound and the zygote imports the backend's modules, but no child
        starts until `go()`. The engine finishes checking its input meanwhile; `stop()` instead starts
        nothing else."""
        self.config, self.finish = config, finish   # finish(job): build its record, wake its waiters
        self.held = threading.Event()              # the thread waits for go() (or has ended)
        self.released = threading.Event()          # go() was called
        self.max_workers, self.idle_timeout_s = max_workers, idle_timeout_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        self.gate = threading.Lock()   # submit vs. the loop's end: a job is either queued in time or refused
        self.closing = False
        self.jobs: list[JobRun] = []               # not finished, in submission order
        self.by_seq: dict[int, JobRun] = {}        # global sequence id -> its job, while it runs
        self.wants: list[tuple[JobRun, int, int, int]] = []  # dsbd: (job, sequence, beam slot, the round it was
                                                             # asked for in) waiting for a worker
        self.assigned: dict[int, tuple[int, list]] = {}  # worker id -> (job, the entries it was last assigned)
        self.intensity = Intensity(config.max_restarts, config.restart_period_s)   # supervisor.py
        self.epochs: dict[int, int] = {}           # worker id -> its restarts so far
        self.resuming: dict[int, JobRun] = {}      # restarted worker -> the job whose sequences it resumes
        self.last_heartbeat_check = time.monotonic()
        self.reannounce: dict[int, JobRun] = {}    # jobs a restarted verifier must be told of again
        self.resyncing: set[int] = set()           # jobs whose workers resync once the new verifier has them
        self.broken: str | None = None             # set once the verifier is gone: no job can run
        self.started = threading.Event()
        self.failure: Exception | None = None      # why the engine's thread ended early: go() raises it
        self.table: ProcessTable | None = None
        self.endpoints = None                      # where the children connect, once started
        self.rejected_telemetry = 0                # telemetry messages refused (reports.py)
        self.keys, self.gatekeeper = keys, None    # who may speak (security.py), and the gatekeeper that judges it
        self.refused_handshakes = 0                # peers without the key, refused (joining.py)
        self.verifier_refused: dict[int, int] = {} # each verifier's own count, by its pid
        self.refused_joins = 0                     # workers from other hosts refused at hello (vocabulary, room)
        self.vocabulary: dict | None = None        # the target's, once a worker asks to join
        self.thread = threading.Thread(target=self._thread, name="specsched-engine", daemon=True)  # held_start.py
        self.thread.start()

    # -- called from other threads ------------------------------------------------------------------
    def submit(self, job: JobRun) -> None:
        self._post("submit", job)

    def prestart(self, n: int) -> None:
        self._post("workers", n)

    def cancel(self, job: JobRun, reason: str) -> None:
        self._post("cancel", (job, reason))

    def _post(self, kind: str, arg) -> None:
        with self.gate:
            if self.closing:
                raise RuntimeError(self.broken or "the engine is closed")
            self.inbox.put((kind, arg))
            os.write(self.wake_w, b".")

    def stop(self, reason: str | None) -> None:
        """Stop every process; unfinished jobs end interrupted, with `reason` ("interrupted (Ctrl-C)") as error."""
        with self.gate:
            if not self.closing:
                self.inbox.put(("stop", reason))
                os.write(self.wake_w, b"x")
        self.thread.join()

    # -- the loop ------------------------------------------------------------------------------------
    def _main(self) -> None:
        run_dir = private_dir("specsched-", "telemetry.sock")  # the ipc sockets live here (and the logs)
        ctx = zmq.Context()
        self.sink, self.control = ctx.socket(zmq.PULL), ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a child it cannot reach raises, never vanishes
        self.control.setsockopt(zmq.ROUTER_HANDOVER, 1)   # a new process under a reused name takes the name over
        reason: str | None = "the engine stopped"
        status = "interrupted"  # what a job still running becomes: closing the engine interrupts it
        try:
            self.endpoints = endpoints = make_endpoints(self.config.transport, run_dir, self.config.listen)
            if self.keys is not None:  # PLAIN (ipc) or CURVE (tcp) servers, and a gatekeeper that admits the run only
                self.gatekeeper = Gatekeeper(ctx, self.keys)
                for sock in (self.sink, self.control):
                    secure_server(sock, self.keys)
                    self.gatekeeper.watch(sock)
                self.gatekeeper.start()
            self._bind(endpoints)
            base = {"config": self.config.to_dict(), "endpoints": endpoints.to_dict(), "ppid": os.getpid(),
                    "keys": self.keys.to_dict() if self.keys is not None else None}
            self.table = ProcessTable(run_dir, base, preload_modules(self.config),
                                      tell_stop=lambda child: self._send(child, "stop", {}))
            if not self._released():  # stopped while held: the zygote has nothing to fork, so it goes at once
                self.table.zygote.close(grace=0)
                return
            self.table.spawn("verifier", self.config.verifier_threads or os.cpu_count() or 1)
            self.started.set()
            reason = self._loop()
        except ConfigError as exc:  # bad input found here (an address in use): go() says it, in one line
            reason, status, self.failure = str(exc), "failed", exc
        except BaseException as exc:  # the loop itself broke: no job may hang on it, and submit says why
            reason, status = f"engine failure: {type(exc).__name__}: {exc}", "failed"
            self.failure, self.broken = RuntimeError(reason), reason
            raise
        finally:
            with self.gate:  # from here on submit refuses: nothing queued later could ever run
                self.closing = True
            while not self.inbox.empty():
                kind, arg = self.inbox.get()
                if kind == "submit":
                    self.jobs.append(arg)
            self._shutdown(reason, status)
            self.sink.close(linger=0)
            self.control.close(linger=0)
            if self.gatekeeper is not None:
                self.gatekeeper.stop()
            ctx.term()
            os.close(self.wake_r)
            os.close(self.wake_w)
            shutil.rmtree(run_dir, ignore_errors=True)

    def _loop(self) -> str | None:
        poller = zmq.Poller()
        for s in (self.sink, self.control):
            poller.register(s, zmq.POLLIN)
        poller.register(self.wake_r, zmq.POLLIN)
        last_view = 0.0
        while True:
            ready = dict(poller.poll(TICK_S * 1000))
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            while not self.inbox.empty():
                kind, arg = self.inbox.get()
                if kind == "stop":
                    return arg
                if kind == "workers":
                    self._prestart(arg)
                elif kind == "cancel":
                    job, why = arg
                    if job in self.jobs:
                        self._end(job, "interrupted", why)
                else:
                    self._accept(arg)
            while self.control.poll(0):
                self._hello(self.control.recv_multipart(copy=False))
            for _ in range(DRAIN_MAX):  # a telemetry flood still leaves turns for the dead, admission, views
                if not self.sink.poll(0):
                    break
                self._telemetry(self.sink.recv_multipart(copy=False))
            self._check_heartbeats()
            self._count_refused()
            self._reap()
            self._hand_resumed()
            self._hand_beam_workers()
            self._admit()
            self._retire_idle()
            now = time.monotonic()
            if now - last_view >= TICK_S:   # live views keep their clocks moving on quiet ticks too
                last_view = now
                for job in self.jobs:
                    if job.phase is Phase.RUNNING:
                        self._note_states(job)
                        if job.on_update:
                            self._update(job)

    def _note_states(self, job: JobRun) -> None:
        """The job's processes' states, by the job's own names, for its live view."""
        job.collected.states = {name: self.table.by_name(pool).state.value
                                for name, pool in job.process_names().items()}

    @staticmethod
    def _update(job: JobRun) -> None:
        """A job's view callback; one that raises is dropped (a broken view must not stop the engine)."""
        try:
            job.on_update(job.collected)
        except BaseException as exc:  # SystemExit too: a view must never take the engine's thread down
            job.on_update = None
            job.view_error = f"{type(exc).__name__}: {exc}"

    def _accept(self, job: JobRun) -> None:
        if self.broken:
            self.broken_job(job, self.broken)
        else:
            self.jobs.append(job)

    # -- children ------------------------------------------------------------------------------------
    def _send(self, child: Child, kind: str, fields: dict) -> None:
        """To a child that said ready (the ROUTER knows it; ROUTER_MANDATORY makes anything else an error).
        One that has died and is not reaped yet cannot be reached: the next look at the dead handles it."""
        try:
            to = self.keys.routing_id(child.name, child.name) if self.keys else child.name.encode()
            self.control.send_multipart([to, *pack(kind, fields)])
        except zmq.ZMQError:
            pass

    def _assign(self, child: Child, job: JobRun, sequences: list[list], epoch: int = 0) -> None:
        """Tell a worker to draft `sequences` of `job`: entries (sequence id, index in the job, prompt, beam
        slot[, how[, want]]), as serve() in workers/draft_worker.py reads them. Kept: a restart resumes them."""
        self.assigned[child.worker] = (job.id, sequences)
        self._send(child, "assign", {"job": job.id, "config": job.config.to_dict(), "epoch": epoch,
                                     "sequences": sequences})

    def _reap(self) -> None:
        dead = self.table.dead()
        if self.table.zygote.died and not self.broken:  # broken: it died once too often, and was told so
            self._supervise_zygote()
        for child, code in dead:
            if self.broken:  # the zygote could not be restarted: every job has failed already
                break
            self._supervise(child, code)

    # -- telemetry -----------------------------------------------------------------------------------
    def _job(self, job_id: int) -> JobRun | None:
        return next((j for j in self.jobs if j.id == job_id), None)
