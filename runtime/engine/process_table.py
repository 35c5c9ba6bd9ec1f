"""The process table: every child the engine started, its state, and how it ends.

A child is forked by the engine's zygote (zygote_main.py: one pre-warmed interpreter per engine, started
with the table), ignores Ctrl-C (the engine's), and dies with the zygote, which dies with the
engine's thread (PR_SET_PDEATHSIG). States:

    starting -> ready -> drafting <-> waiting -> parked -> ... -> retiring -> exited
                (verifier: starting -> ready -> exited)

``ready`` is a loaded worker that has not served yet, ``parked`` an idle one kept for the next job,
``drafting``/``waiting`` a worker serving a job (which of the two, the live view reads off its last
event). Every change is timestamped, so traces show the table over time.
"""

from __future__ import annotations

import enum
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..core.security import Keys
from ..core.transport import process_name
from .zygote import Forked, Zygote

HISTORY = 256  # state changes kept per child (records show those within each job's window)
# A worker on another host names itself by a pid the engine gives it (runtime/core/transport.wire_pid):
# above Linux's largest pid_max (2**22), so it is never the pid of a child of this engine.
REMOTE_PID_BASE = 2**22


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAFTING = "drafting"
    PARKED = "parked"
    RETIRING = "retiring"    # told to stop after idling too long; exited once reaped
    EXITED = "exited"


@dataclass(slots=True)
class Child:
    name: str
    role: str
    worker: int                  # -1 for the verifier
    proc: Forked
    log: Path
    threads: int
    state: State = State.STARTING
    job: int | None = None       # the job it serves now
    since: float = field(default_factory=time.monotonic)  # when it entered its state
    history: list[tuple[float, str, int | None]] = field(default_factory=list)
    beat: float = field(default_factory=time.monotonic)  # when its last heartbeat arrived (heartbeat.py)
    hung: str | None = None      # why the engine killed it, when it did (no heartbeat)
    said: str | None = None      # the error it reported before it exited
    state_before_exit: str = ""  # what it was doing when it died (the supervisor asks)
    host: str | None = None      # a worker on another host (joined over --listen): its address; None = forked here
    placed: dict = field(default_factory=dict)  # what it said with ready: {"device", "asked"} (child.placed)

    def become(self, state: State, job: int | None = None) -> None:
        self.state, self.job, self.since = state, job, time.monotonic()
        self.history.append((self.since, state.value, job))
        del self.history[:-HISTORY]

    @property
    def idle(self) -> bool:
        return self.state in (State.READY, State.PARKED)


class ProcessTable:
    def __init__(self, run_dir: Path, base_spec: dict, preload: list[str], *, tell_stop=lambda child: None) -> None:
        self.run_dir, self.base_spec = run_dir, base_spec
        self.children: dict[str, Child] = {}
        self.spawned = 0  # models loaded over the engine's life (one per child)
        self.joined = 0   # workers that joined from other hosts
        self.tell_stop = tell_stop  # a remote worker is stopped by a message: the engine cannot signal it
        self.preload = preload
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.zygotes = 1  # zygotes started: the first, and one after each death (supervisor.py)
        self.zygote = Zygote(run_dir / "zygote.log", preload, self.env)

    def zygote_death(self) -> str:
        """Why the zygote is gone, in one line (its exit status and the last line of its log)."""
        code = self.zygote.proc.wait()
        said = last_line(self.zygote.log)
        return f"the zygote exited with status {code}" + ("" if said.startswith("(no") else f": {said}")

    def new_zygote(self) -> None:
        """A fresh zygote after the last one died (its log kept beside the new one's)."""
        self.zygote.close(grace=0)
        self.zygotes += 1
        self.zygote = Zygote(self.run_dir / f"zygote-{self.zygotes}.log", self.preload, self.env)

    @property
    def verifier(self) -> Child:
        return self.children["verifier"]

    def workers(self) -> list[Child]:
        return [c for c in self.children.values() if c.role == "draft" and c.state is not State.EXITED]

    def by_name(self, name: str) -> Child:
        return self.children[name]

    def by_worker(self, worker: int) -> Child:
        return self.children[process_name("draft", worker)]

    def spawn(self, role: str, threads: int, worker: int | None = None) -> Child:
        """A new child; a draft worker takes `worker` (a restart keeps the dead one's id) or the lowest free id."""
        worker = -1 if role == "verifier" else self._take_worker_id() if worker is None else worker
        name = process_name(role, worker)
        log = self.run_dir / f"{name}.log"
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        proc = self.zygote.fork({**self.base_spec, "role": role, "worker": worker, "keys": self._keys(name)},
                                log, env, threads)
        child = Child(name, role, worker, proc, log, threads)
        child.become(State.STARTING)
        self.children[name] = child
        self.spawned += 1
        return child

    def _keys(self, name: str) -> dict | None:
        """What the child `name` holds (runtime/core/security.py): on ipc its own password, and the run's secret
        only if it is the verifier (which admits the workers); on tcp the run's worker keys."""
        keys = self.base_spec.get("keys")
        if keys is None or not Keys.from_dict(keys).plain:
            return keys
        return Keys.from_dict(keys).as_user(name, keep_secret=name == "verifier").to_dict()

    def adopt(self, host: str) -> Child:
        """A worker on another host that joined (runtime/engine/joining.py): a child the engine did not fork.
        It counts as exited once it says so, or once the engine gives up on it (``kill``)."""
        proc = Forked()
        proc.answer(REMOTE_PID_BASE + self.joined)
        self.joined += 1
        worker = self._take_worker_id()
        name = process_name("draft", worker)
        child = Child(name, "draft", worker, proc, self.run_dir / f"{name}.log", 1, host=host)
        child.become(State.STARTING)
        self.children[name] = child
        return child

    def _take_worker_id(self) -> int:
        """The lowest id no live worker holds: a fresh engine numbers its workers 0..n-1, as runs always did."""
        taken = {c.worker for c in self.workers()}
        return next(w for w in range(len(taken) + 1) if w not in taken)

    def kill(self, child: Child) -> None:
        """SIGKILL (which ends a stopped process too); the next look at the dead reaps it. A remote worker is
        given up on: told to stop, and counted as dead."""
        if child.host is not None:
            self.tell_stop(child)
            child.proc.exited(-9)
            return
        if child.proc.known_pid is None:  # psutil.Process(None) would be this process
            return
        try:
            psutil.Process(child.proc.known_pid).kill()
        except psutil.NoSuchProcess:
            pass

    def dead(self) -> list[tuple[Child, int]]:
        """Children that exited unasked since last looked at, with their exit status; retired ones that
        have exited are reaped quietly."""
        out = []
        for c in self.children.values():
            if c.state is not State.EXITED and (code := c.proc.poll()) is not None:
                if not (c.state is State.RETIRING and code == 0):
                    out.append((c, code))
                c.state_before_exit = c.state.value
                c.become(State.EXITED, c.job)  # the job it was serving, for whoever must fail it
        return out

    def stop(self, children: list[Child], grace: float = 3.0) -> None:
        """SIGTERM each child and anything it started, a grace period, SIGKILL, then reap: no orphans,
        no zombies."""
        procs = []
        for child in [c for c in children if c.host is not None and c.proc.poll() is None]:
            self.tell_stop(child)
            child.proc.exited(0)
        for child in children:
            pid = child.proc.known_pid
            if child.proc.poll() is not None or pid is None:
                continue  # reaped (its pid may be someone else's now), or not forked yet (the zygote's close ends it)
            try:
                p = psutil.Process(pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=grace)
        for child in children:
            try:
                child.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass  # never forked: closing the zygote ends the request
            if child.state is not State.EXITED:
                child.become(State.EXITED)

    def why(self, child: Child) -> str:
        """The last line a dead child left; if it left none because the zygote died, the zygote's."""
        if child.host is not None:
            return f"the worker at {child.host} left"
        said = last_line(child.log)
        if said in ("(no log)", "(no output)") and self.zygote.proc.poll() is not None:
            return f"the zygote exited with status {self.zygote.proc.returncode}: {last_line(self.zygote.log)}"
        return said

    def teardown(self) -> None:
        self.stop([c for c in self.children.values() if c.proc.returncode is None])  # never a reaped pid
        self.zygote.close()

    def snapshot(self) -> list[dict]:
        """The table as a user sees it (`Engine.processes`): name, pid, role, state, job, host (None: local)."""
        return [{"name": c.name, "pid": c.proc.known_pid, "role": c.role, "state": c.state.value, "job": c.job,
                 "since": c.since, "host": c.host}
                for c in tuple(self.children.values())]  # the engine's thread may add one


def last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(no output)"
