"""``specsched.Engine``: start the processes once, run many jobs on them.

    with Engine(backend="sim") as engine:
        record = engine.generate(["Name three colours."], max_new_tokens=16)   # a RunRecord
        a = engine.submit(["first"], policy="fcfs")                             # returns at once
        b = engine.submit(["second"], policy="fcfs", priority=-1)               # served beside a
        records = [a.result(), b.result()]

The engine's settings are the models it loads (backend, target, draft, device, dtype and the sim backend's
costs), the transport and the verifier's threads; every other RunConfig field is a job's own. A job
needing more draft workers than are parked gets new ones; workers idle longer than ``idle_timeout_s``
are retired. Jobs whose policy differs from the running speculative jobs' wait until those finish.
A job's tokens never depend on what ran before or beside it: its random streams are keyed by its own
seed and sequence numbers (tested against one-shot runs).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from ..backends.backend import get_backend
from ..core.config import RunConfig, TransportKind
from ..core.config_checks import is_number
from ..core.device import is_cuda, mps_daemon_running
from ..core.security import Keys, load_keys
from .collected import Collected
from .dispatcher import Dispatcher
from .job_checks import JobChecks, check_engine_options, check_job_options, with_settings
from .jobs import JobMeta, JobRun
from .provenance import provenance
from .record import RunRecord, build_record


class Job:
    """A submitted job: a future whose result is the job's RunRecord."""

    def __init__(self, run: JobRun) -> None:
        self._run = run

    @property
    def id(self) -> int:
        return self._run.id

    @property
    def sequence_ids(self) -> list[int]:
        """The engine's ids of the job's sequences, in prompt order (what its messages and records name)."""
        return [self._run.first_seq + i for i in range(self._run.n)]

    @property
    def workers(self) -> list[int]:
        """The engine's pool ids of the job's draft workers, once it has them: its worker i is ``workers[i]``
        (what its events and record call worker i; empty while it waits, and for the target alone)."""
        return list(self._run.workers)

    @property
    def prompt_tokens(self) -> list[int]:
        """Each sequence's prompt length in tokens, as the target reads it (chat template included)."""
        return [len(p) for p in self._run.prompts]

    @property
    def collected(self) -> Collected:
        """What the job's processes have reported so far (live; read-only)."""
        return self._run.collected

    def done(self) -> bool:
        return self._run.finished.is_set()

    def result(self, timeout: float | None = None) -> RunRecord:
        """Wait for the record. Ctrl-C while waiting raises KeyboardInterrupt here; the job keeps running
        until the engine is closed (then its record says interrupted and keeps every verified token)."""
        if timeout is not None and not is_number(timeout):
            raise TypeError(f"timeout must be seconds or None, got {timeout!r}")
        if timeout is not None and not timeout >= 0:  # NaN too: it would wait forever
            raise ValueError(f"timeout must be seconds >= 0 or None, got {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._run.finished.wait(0.05):  # short waits: signals reach the waiting thread
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} still running after {timeout} s")
        if self._run.record is None:
            raise RuntimeError(f"job {self.id}: {self._run.error}")
        return self._run.record


class Engine:
    def __init__(self, config: RunConfig | None = None, *, max_workers: int = 64, idle_timeout_s: float = 300.0,
                 refuse_overlong: bool = True, planned: Sequence[tuple[str, RunConfig]] = (), **settings) -> None:
        """`config` (or RunConfig keyword settings) gives the engine's models and the jobs' defaults.
        Bad input - unknown models, vocabularies that differ, a default job that could not run (`submit`)
        - raises ConfigError/PolicyError here, before any model loads (the zygote, started meanwhile to import
        the model libraries, is stopped). `refuse_overlong`: `submit` refuses a job that needs more positions
        than the target has (a tree, whose prompts grow as it is built, runs them as the model reads them).
        `planned`: the jobs to come, as (name, config), each checked as `submit` will check it before any
        model loads (a workload's: a late job refused mid-play would take the records before it)."""
        self.config = with_settings(config, settings, "engine")
        planned = check_engine_options(max_workers, idle_timeout_s, refuse_overlong, planned)
        self.max_workers, self.refuse_overlong = max_workers, refuse_overlong
        self._backend = get_backend(self.config)
        self._checks = JobChecks(self.config, self._backend, max_workers)  # what a job must pass
        # the cheap checks first: a mistyped policy or path is one line before torch is imported
        self._checks.check_plan(self.config)
        self._backend.check_paths()
        # who may speak on its sockets (runtime/core/security.py): tcp, CURVE keys from --keys or made for this
        # engine alone; ipc, a password made for this run
        keys = load_keys(self.config.network.keys, engine=True) if self.config.network.keys else \
            Keys.generate() if self.config.network.transport == TransportKind.TCP else Keys.for_ipc()
        self._lock = threading.Lock()
        self._ids, self._next_seq = itertools.count(), 0
        self._closed = False
        # held: the zygote imports torch and transformers (seconds) while this process checks what needs them;
        # on a 2-core machine the two imports overlap. Refused input stops it before any model loads.
        self._dispatcher = Dispatcher(self.config, self._finish, max_workers=max_workers,
                                      idle_timeout_s=idle_timeout_s, keys=keys)
        # an engine nobody closed still stops its processes and removes its sockets at interpreter exit
        weakref.finalize(self, self._dispatcher.stop, "interrupted (the engine was never closed)")
        try:
            self._backend.check()
            # MPS clients attach when their CUDA context is made: the daemon's state now is the run's
            self.mps = mps_daemon_running() if is_cuda(self.config.model_device) else None
            self._checks.drafter_corpus(self.config)  # a corpus cache that is missing or damaged: refused now
            self.tokenizer = self._backend.tokenizer()
            self._checks.loaded(self.tokenizer, self._backend.context_length())
            for name, cfg in planned:
                self._checks.check_planned(name, cfg)
            self._dispatcher.go()
        except BaseException:
            self._dispatcher.stop("refused")
            raise

    # -- jobs ----------------------------------------------------------------------------------------
    def submit(self, prompts: str | list[str] | None = None, *, config: RunConfig | None = None, priority: int = 0,
               deadline_s: float | None = None, name: str = "",
               on_update: Callable[[Collected], None] | None = None, **settings) -> Job:
        """Queue a job and return at once. `prompts` (or `config.prompts`) as for `specsched run`: one
        prompt shared by `workers` sequences, or one per sequence; other keywords are RunConfig fields."""
        check_job_options(priority, deadline_s, name, on_update)
        checks = self._checks
        cfg = checks.with_prompts(checks.job_config(prompts, config, settings))
        checks.check_plan(cfg)  # a job that cannot run is bad input, refused before it runs
        cfg = cfg.replace(corpus_cache=checks.drafter_corpus(cfg))
        tokens = checks.encode(cfg)
        if self.refuse_overlong:
            checks.check_length(cfg, tokens)
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            job_id, first = next(self._ids), self._next_seq
            self._next_seq += len(tokens)
        run = JobRun(job_id, cfg, tokens, JobMeta(priority, deadline_s, name), first, on_update=on_update)
        self._dispatcher.submit(run)
        return Job(run)

    def generate(self, prompts: str | list[str] | None = None, **kwargs) -> RunRecord:
        """Run one job and return its record (``submit(...).result()``)."""
        return self.submit(prompts, **kwargs).result()

    def _finish(self, run: JobRun) -> None:
        """In the engine's thread: the job's record, then its waiters wake."""
        try:
            prov = provenance(run.config, run.collected.threads, engine=self.config)
            record = build_record(run.config, run.collected, run.status, run.error, self.tokenizer.decode, prov)
            queued = (run.admitted or run.submitted) - run.submitted
            record.extra["engine"] = {
                "job": run.id, "name": run.meta.name, "priority": run.meta.priority,
                "workers": list(run.workers),  # its workers' ids in the engine's pool (what its policy saw)
                "deadline_s": run.meta.deadline_s, "queued_s": queued,
                "models_loaded": run.spawned, "engine_models_loaded": self._dispatcher.table.spawned,
                "processes": run.history,  # each process's state changes during the job: [time, state]
                "refused_joins": self._dispatcher.refused_joins,  # workers from other hosts refused at hello
                "view_error": run.view_error,  # the live view's callback raised this, and was dropped
            }
            if self.mps is not None:  # on CUDA: did the processes' kernels run concurrently (MPS) or time-slice?
                record.extra["mps_daemon"] = self.mps
            # what the engine itself cost this job: its whole time minus waiting for workers and decoding
            record.extra["engine"]["overhead_s"] = max(
                time.monotonic() - run.submitted - queued - record.metrics.wall_s, 0.0)
            run.record = record
        except Exception as exc:  # the job's waiters must wake whatever happened; result() says why
            run.error = f"its record could not be built: {type(exc).__name__}: {exc}"
        finally:
            run.finished.set()

    # -- the processes -------------------------------------------------------------------------------
    def start_workers(self, n: int, timeout: float = 600.0) -> None:
        """Start draft workers until `n` are up (within max_workers) and wait until every one has loaded
        its model: what a benchmark or a workload does so that no job's times include a model load."""
        self._dispatcher.prestart(n)
        deadline = time.monotonic() + timeout
        while True:
            states = [p["state"] for p in self.processes if p["role"] == "draft" and p["state"] != "exited"]
            if len(states) >= min(n, self._dispatcher.max_workers) and "starting" not in states:
                return
            if self.broken or time.monotonic() > deadline:
                raise RuntimeError(self.broken or f"draft workers not ready after {timeout} s")
            time.sleep(0.02)

    def wait_for_remote_workers(self, n: int, timeout: float) -> None:
        """Wait until `n` workers from other hosts have joined (``specsched worker --connect``, an engine
        started with ``listen``) and loaded their models."""
        deadline = time.monotonic() + timeout
        while sum(p["host"] is not None and p["state"] in ("ready", "parked") for p in self.processes) < n:
            if self.broken or time.monotonic() > deadline:
                raise RuntimeError(self.broken or f"{n} worker(s) from other hosts did not join within {timeout:g} s")
            time.sleep(0.05)

    @property
    def refused_handshakes(self) -> int:
        """tcp: handshakes refused over the engine's life - peers without the run's key (gatekeeper.py)."""
        return self._dispatcher.refused_handshakes

    @property
    def processes(self) -> list[dict]:
        """The process table now: name, pid, role, state, job."""
        table = self._dispatcher.table
        return table.snapshot() if table is not None else []

    @property
    def endpoints(self) -> dict:
        """Where the children connect (verify, telemetry, control), once the engine has started."""
        if not self._dispatcher.started.wait(timeout=60) or self._dispatcher.endpoints is None:
            raise RuntimeError(self.broken or "the engine did not start")
        return self._dispatcher.endpoints.to_dict()

    def credentials(self, name: str):
        """What the process `name` of this run holds to connect (runtime/core/security.py Keys): on ipc its own
        password (and `routing_id` names its sockets); on tcp the run's worker keys. For tools and tests that
        speak as one of the run's processes."""
        keys = self._dispatcher.keys
        return None if keys is None else keys.as_user(name) if keys.plain else keys.for_worker()

    @property
    def rejected_telemetry(self) -> int:
        """Telemetry messages refused over the engine's life: malformed, or from no child of this engine."""
        return self._dispatcher.rejected_telemetry

    @property
    def broken(self) -> str | None:
        """Why no job can run any more (the verifier died), or None."""
        return self._dispatcher.broken

    @property
    def draft_reads_features(self) -> bool:
        """Whether its workers' draft reads the target's features (a feature draft): it runs no --mode dsbd job."""
        return self._backend.draft_reads_features()

    @property
    def models_loaded(self) -> int:
        table = self._dispatcher.table
        return table.spawned if table is not None else 0

    def cancel(self, job: Job, reason: str = "interrupted (cancelled)") -> None:
        """End one job now (its processes stop; the engine goes on); its record keeps what was verified."""
        self._dispatcher.cancel(job._run, reason)

    def close(self, reason: str | None = None) -> None:
        """Stop every process (none is left behind). Jobs still running end interrupted, with `reason` as
        their error, keeping every token verified so far."""
        with self._lock:
            self._closed = True
        self._dispatcher.stop(reason or "interrupted (the engine was closed)")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is KeyboardInterrupt:
            self.close("interrupted (Ctrl-C)")
        else:
            self.close()
