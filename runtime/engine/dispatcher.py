"""The engine's thread: it owns every socket and the process table, and moves jobs along.

One loop, like a kernel's: take submissions and cancellations (inbox.py, woken through a pipe), hear the
children (reports.py), judge who fell silent (liveness.py), notice the dead and restart what can resume
(supervisor.py), admit pending jobs and retire idle workers (admission.py), refresh the live views. How a
job ends - complete, failed, cancelled, or at shutdown - is endings.py; workers from other hosts,
joining.py; what the engine tells its children, orders.py. Each part is an object the dispatcher holds
and builds once the children's table exists; each is given only the parts it calls.

However the thread ends, even before its sockets exist, ``go()`` learns why: ConfigError for an address it
could not listen on (``--listen`` on a port another process holds), RuntimeError otherwise.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import zmq

from ..backends.backend import preload_modules
from ..core.config import ConfigError, RunConfig
from ..core.gatekeeper import Gatekeeper
from ..core.security import Keys, secure_server
from ..core.transport import end_context, make_endpoints, private_dir
from .admission import Admission
from .endings import Endings
from .inbox import Inbox
from .jobs import JobRun, LiveJobs
from .joining import Joining
from .liveness import Liveness
from .orders import Orders
from .process_table import ProcessTable
from .reports import Reports
from .supervisor import Supervisor

TICK_S = 0.1          # longest wait between two looks at the children and the views
DRAIN_MAX = 1000      # telemetry messages read per turn of the loop


class Dispatcher:
    """Owns the sockets, the process table, the `inbox`, the `live` jobs and the parts that act on them:
    `endings` (from the start: a thread that fails early still ends its jobs), then, once the table exists,
    `supervisor`, `admission`, `joining`, `liveness` and `reports`."""

    def __init__(self, config: RunConfig, finish, *, max_workers: int, idle_timeout_s: float,
                 keys: Keys | None = None) -> None:
        """It starts held: the sockets are bound and the zygote imports the backend's modules, but no child
        starts until `go()`. The engine finishes checking its input meanwhile; `stop()` instead starts
        nothing else."""
        self.config, self.keys = config, keys     # keys: who may speak (security.py)
        self.max_workers, self.idle_timeout_s = max_workers, idle_timeout_s
        self.inbox = Inbox()
        self.live = LiveJobs()
        self.endings = Endings(self.live, finish, self._salvage)  # finish(job): build its record, wake its waiters
        self.started = threading.Event()
        self.failure: Exception | None = None      # why the engine's thread ended early: go() raises it
        self.table: ProcessTable | None = None
        self.endpoints = None                      # where the children connect, once started
        self.gatekeeper: Gatekeeper | None = None  # judges who may speak, on ipc and tcp alike
        self.supervisor: Supervisor | None = None
        self.admission: Admission | None = None
        self.joining: Joining | None = None
        self.liveness: Liveness | None = None
        self.reports: Reports | None = None
        self.thread = threading.Thread(target=self._thread, name="specsched-engine", daemon=True)
        self.thread.start()

    # -- what the engine reads ------------------------------------------------------------------------
    @property
    def broken(self) -> str | None:
        """Why no job can run any more (the verifier is gone for good, or the loop broke), or None."""
        return self.endings.broken

    @property
    def rejected_telemetry(self) -> int:
        return self.reports.rejected_telemetry if self.reports is not None else 0

    @property
    def refused_handshakes(self) -> int:
        return self.joining.refused_handshakes if self.joining is not None else 0

    @property
    def refused_joins(self) -> int:
        return self.joining.refused_joins if self.joining is not None else 0

    # -- called from other threads ------------------------------------------------------------------
    def go(self) -> None:
        """Start the verifier and take jobs. If the engine's thread has ended instead, raise why: ConfigError
        for an address it could not listen on, RuntimeError otherwise."""
        if not self.inbox.release():
            raise self.failure or RuntimeError("the engine stopped before it started")

    def submit(self, job: JobRun) -> None:
        self._post("submit", job)

    def prestart(self, n: int) -> None:
        self._post("workers", n)

    def cancel(self, job: JobRun, reason: str) -> None:
        self._post("cancel", (job, reason))

    def _post(self, kind: str, arg) -> None:
        if not self.inbox.post(kind, arg):
            raise RuntimeError(self.broken or "the engine is closed")

    def stop(self, reason: str | None) -> None:
        """Stop every process; unfinished jobs end interrupted, with `reason` ("interrupted (Ctrl-C)") as error."""
        self.inbox.post_stop(reason)
        self.thread.join()

    # -- the thread ----------------------------------------------------------------------------------
    def _thread(self) -> None:
        """However the thread ends (even before its sockets exist), go() and submit() learn it."""
        try:
            self._main()
        except BaseException as exc:
            self.failure = self.failure or RuntimeError(f"engine failure: {type(exc).__name__}: {exc}")
            if self.inbox.released.is_set():  # before go(), go() raises it to the engine's caller instead
                raise
        finally:
            self.inbox.end()

    def _main(self) -> None:
        run_dir = private_dir("specsched-", "telemetry.sock")  # the ipc sockets live here (and the logs)
        ctx = zmq.Context()
        self.sink, self.control = ctx.socket(zmq.PULL), ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a child it cannot reach raises, never vanishes
        self.control.setsockopt(zmq.ROUTER_HANDOVER, 1)   # a new process under a reused name takes the name over
        reason: str | None = "the engine stopped"
        status = "interrupted"  # what a job still running becomes: closing the engine interrupts it
        try:
            net = self.config.network
            self.endpoints = endpoints = make_endpoints(net.transport, run_dir, net.listen)
            if self.keys is not None:  # PLAIN (ipc) or CURVE (tcp) servers, and a gatekeeper that admits the run only
                self.gatekeeper = Gatekeeper(ctx, self.keys)
                for sock in (self.sink, self.control):
                    secure_server(sock, self.keys)
                    self.gatekeeper.watch(sock)
                self.gatekeeper.start()
            self._bind(endpoints)
            base = {"config": self.config.to_dict(), "endpoints": endpoints.to_dict(), "ppid": os.getpid(),
                    "keys": self.keys.to_dict() if self.keys is not None else None}
            orders = Orders(self.control, self.keys)
            self.table = ProcessTable(run_dir, base, preload_modules(self.config),
                                      tell_stop=lambda child: orders.send(child, "stop", {}))
            self._build(self.table, orders)
            if not self.inbox.wait_released():  # stopped while held: the zygote has nothing to fork, so it goes at once
                self.table.zygote.close(grace=0)
                return
            self.table.spawn("verifier", self.config.verifier_threads or os.cpu_count() or 1)
            self.started.set()
            reason = self._loop()
        except ConfigError as exc:  # bad input found here (an address in use): go() says it, in one line
            reason, status, self.failure = str(exc), "failed", exc
        except BaseException as exc:  # the loop itself broke: no job may hang on it, and submit says why
            reason, status = f"engine failure: {type(exc).__name__}: {exc}", "failed"
            self.failure, self.endings.broken = RuntimeError(reason), reason
            raise
        finally:
            self.inbox.close()  # from here on submit refuses: nothing queued later could ever run
            for kind, arg in self.inbox.take():
                if kind == "submit":
                    self.live.jobs.append(arg)
            self.endings.shutdown(reason, status)
            self.sink.close(linger=0)
            self.control.close(linger=0)
            if self.gatekeeper is not None:
                self.gatekeeper.stop()
            end_context(ctx)
            self.inbox.close_pipe()
            shutil.rmtree(run_dir, ignore_errors=True)

    def _bind(self, endpoints) -> None:
        for sock, address in ((self.sink, endpoints.telemetry), (self.control, endpoints.control)):
            try:
                sock.bind(endpoints.bind(address))
            except zmq.ZMQError as exc:  # --listen HOST:PORT that another process holds, say
                listen = self.config.network.listen
                where = f"--listen {listen}" if listen and sock is self.control else address
                raise ConfigError(f"{where}: cannot listen there: {zmq.strerror(exc.errno)}") from None

    def _build(self, table: ProcessTable, orders: Orders) -> None:
        """The parts, each given what it calls: built in the order they depend on each other."""
        config, live = self.config, self.live
        self.endings.started(table, orders)
        self.supervisor = Supervisor(config, table, live, orders, self.endings, self._salvage)
        self.admission = Admission(config, table, live, orders, self.supervisor,
                                   max_workers=self.max_workers, idle_timeout_s=self.idle_timeout_s)
        self.joining = Joining(config, table, live, orders, self.endpoints, self.gatekeeper,
                               max_workers=self.max_workers)
        self.liveness = Liveness(table, live, config.supervision.heartbeat_timeout_s)
        self.reports = Reports(self.keys, table, live, supervisor=self.supervisor, admission=self.admission,
                               endings=self.endings, joining=self.joining)

    # -- the loop ------------------------------------------------------------------------------------
    def _loop(self) -> str | None:
        poller = zmq.Poller()
        for s in (self.sink, self.control):
            poller.register(s, zmq.POLLIN)
        poller.register(self.inbox.wake_r, zmq.POLLIN)
        last_view = 0.0
        while True:
            ready = dict(poller.poll(TICK_S * 1000))
            if self.inbox.wake_r in ready:
                self.inbox.woken()
            for kind, arg in self.inbox.take():
                if kind == "stop":
                    return arg
                if kind == "workers":
                    self.admission.prestart(arg)
                elif kind == "cancel":
                    job, why = arg
                    if job in self.live:
                        self.endings.end(job, "interrupted", why)
                else:
                    self._accept(arg)
            while self.control.poll(0):
                self.reports.hello(self.control.recv_multipart(copy=False))
            for _ in range(DRAIN_MAX):  # a telemetry flood still leaves turns for the dead, admission, views
                if not self.sink.poll(0):
                    break
                self.reports.telemetry(self.sink.recv_multipart(copy=False))
            self.liveness.check()
            self.joining.count_refused()
            self.supervisor.reap()
            self.supervisor.hand_resumed()
            self.admission.hand_beam_workers()
            self.admission.admit()
            self.admission.retire_idle()
            now = time.monotonic()
            if now - last_view >= TICK_S:   # live views keep their clocks moving on quiet ticks too
                last_view = now
                for job in self.live.running():
                    job.show(job.table_states(self.table))

    def _accept(self, job: JobRun) -> None:
        if self.broken:
            self.endings.broken_job(job, self.broken)
        else:
            self.live.jobs.append(job)

    def _salvage(self, quiet_s: float) -> None:
        """Keep every commit still in flight: nothing verified is lost (Ctrl-C too)."""
        while self.sink.poll(int(quiet_s * 1000)):
            self.reports.telemetry(self.sink.recv_multipart(copy=False))
