"""The supervisor: the CLI process that starts the verifier and the draft workers, listens to their
telemetry, and tears every one of them down - on success, on any error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import zmq

from specsched.runtime.child import die_with_parent
from specsched.runtime.config import RunConfig
from specsched.runtime.events import Event
from specsched.runtime.transport import LINGER_MS, Endpoints, make_endpoints
from specsched.runtime.wire import ProtocolError, unpack


class RunFailed(RuntimeError):
    """A child reported an error or died: one line for the user."""


class Interrupted(BaseException):
    """SIGTERM, turned into an exception so that teardown runs (like KeyboardInterrupt)."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log: Path


@dataclass
class Collected:
    """Everything the children reported. What was committed is final even if the run fails."""
    tokens: dict[int, list[int]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)
    counters: dict = field(default_factory=dict)
    verifier_finished: bool = False
    rejected_telemetry: int = 0
    started: float = 0.0
    finished: float = 0.0
    processes: dict[str, int] = field(default_factory=dict)   # child name -> pid, for the live view
    threads: dict[str, int] = field(default_factory=dict)     # child name -> torch threads it was given
    commits: list[tuple[float, int, int]] = field(default_factory=list)  # (received, seq, n tokens)


class Supervisor:
    def __init__(self, config: RunConfig, prompts: list[list[int]],
                 on_update: Callable[[Collected], None] | None = None) -> None:
        self.config = config
        self.prompts = prompts           # tokenised prompt of each sequence
        self.on_update = on_update
        self.children: list[Child] = []
        self.collected = Collected()

    def run(self) -> Collected:
        run_dir = Path(tempfile.mkdtemp(prefix="specsched-"))
        os.chmod(run_dir, 0o700)  # private: the ipc sockets live here
        ctx = zmq.Context()
        sink = ctx.socket(zmq.PULL)
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
        try:
            endpoints = make_endpoints(self.config.transport, run_dir)
            sink.bind(endpoints.telemetry)
            self.collected.started = time.monotonic()
            self._spawn_all(endpoints, run_dir)
            self._listen(sink)
            self.collected.finished = time.monotonic()
            return self.collected
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.teardown()
            self._salvage(sink)
            sink.close(linger=0)
            ctx.term()
            shutil.rmtree(run_dir, ignore_errors=True)

    # -- processes ---------------------------------------------------------------------------
    def _spawn_all(self, endpoints: Endpoints, run_dir: Path) -> None:
        c = self.config
        seqs = [[i, p] for i, p in enumerate(self.prompts)]
        if c.mode == "seed":
            assignments = [[s] for s in seqs]          # one sequence (thought) per worker
        elif c.mode == "sd":
            assignments = [seqs]                       # one worker, sequences in series
        else:
            assignments = []                           # target only
        base = {"config": c.to_dict(), "endpoints": endpoints.to_dict(), "ppid": os.getpid()}
        # Each draft worker computes on one thread; the verifier gets the cores they leave free.
        # Oversubscribing them costs far more than it gains: OpenMP threads spin-wait for a peer that
        # is descheduled (measured here: a 2-thread verifier beside one busy worker on 2 cores ran
        # 4x slower than a 1-thread one).
        cores = os.cpu_count() or 1
        threads = str(c.verifier_threads or max(1, cores - len(assignments)))
        self._spawn("verifier", {**base, "role": "verifier", "sequences": seqs,
                                 "n_workers": len(assignments)}, run_dir, threads)
        for w, assigned in enumerate(assignments):
            self._spawn(f"draft-{w}", {**base, "role": "draft", "worker": w, "sequences": assigned},
                        run_dir, "1")

    def _spawn(self, name: str, spec: dict, run_dir: Path, threads: str) -> None:
        log = run_dir / f"{name}.log"
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
               "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as out:
            proc = subprocess.Popen(child_command(), stdin=subprocess.PIPE, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    preexec_fn=die_with_parent)
        self.children.append(Child(name, proc, log))
        self.collected.processes[name] = proc.pid
        self.collected.threads[name] = int(threads)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()

    def teardown(self) -> None:
        """Stop every child and anything they started: SIGTERM, a grace period, then SIGKILL."""
        procs = []
        for child in self.children:
            try:
                p = psutil.Process(child.proc.pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for p in procs:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=3)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=3)
        for child in self.children:
            child.proc.wait()  # reap: no zombies either

    # -- telemetry ---------------------------------------------------------------------------
    def _listen(self, sink: zmq.Socket) -> None:
        verifier = self.children[0]
        while True:
            arrived = sink.poll(100)
            while arrived and sink.poll(0):
                self._handle(sink.recv_multipart(copy=False))
            if self.on_update:  # also on quiet ticks, so a live view keeps its clock moving
                self.on_update(self.collected)
            if arrived:
                continue
            if verifier.proc.poll() is not None and self.collected.verifier_finished:
                workers = [c for c in self.children[1:] if c.proc.poll() is None]
                if not workers:
                    return
            for child in self.children:
                code = child.proc.poll()
                if code not in (None, 0):
                    self._drain(sink)
                    raise RunFailed(f"{child.name} exited with status {code}: {_last_line(child.log)}")
            if verifier.proc.poll() == 0 and not self.collected.verifier_finished:
                # it sends "finished" before it exits, but on a loaded machine the message can reach this
                # socket well after the exit is visible: wait as long as the child may take to deliver it
                self._drain(sink, timeout=LINGER_MS / 1000 + 1, until=lambda: self.collected.verifier_finished)
                if not self.collected.verifier_finished:
                    raise RunFailed(f"verifier exited without finishing: {_last_line(verifier.log)}")

    def _drain(self, sink: zmq.Socket, timeout: float = 0.5, until: Callable[[], bool] | None = None) -> None:
        """Collect what is still in flight (an error line, the last commits) before failing: for `timeout`
        seconds while messages keep coming, or, with `until`, until it holds or `timeout` is over."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (until and until()):
            if sink.poll(50):
                self._handle(sink.recv_multipart(copy=False))
            elif until is None:
                return

    def _salvage(self, sink: zmq.Socket) -> None:
        """After a stop, keep every commit still in flight: nothing verified is lost (Ctrl-C too)."""
        while sink.poll(200):
            try:
                self._handle(sink.recv_multipart(copy=False))
            except RunFailed:
                pass  # the run is over; its cause was already reported

    def _handle(self, frames: list) -> None:
        c = self.collected
        try:
            msg = unpack(frames)
        except ProtocolError:
            c.rejected_telemetry += 1
            return
        if msg.kind == "events":
            c.events.extend(Event.from_row(r) for r in msg.fields["rows"])
        elif msg.kind == "commit":
            seq = int(msg.fields["seq"])
            tokens = msg.arrays["tokens"].tolist()
            c.tokens.setdefault(seq, []).extend(tokens)
            c.commits.append((time.monotonic(), seq, len(tokens)))
            if msg.fields.get("done"):
                c.done.add(seq)
        elif msg.kind == "stats":
            c.counters = dict(msg.fields["counters"])
            c.verifier_finished = True
        elif msg.kind == "error":
            raise RunFailed(str(msg.fields.get("message", "a child process failed")))


def child_command() -> list[str]:
    """A fresh interpreter that imports specsched from wherever this process found it.

    That covers a wheel, an editable install and bin/specsched running from a checkout alike.
    """
    pkg = sys.modules["specsched"]
    boot = ("import importlib.util as u, sys; "
            f"s = u.spec_from_file_location('specsched', {pkg.__file__!r}, "
            f"submodule_search_locations={list(pkg.__path__)!r}); "
            "m = u.module_from_spec(s); sys.modules['specsched'] = m; s.loader.exec_module(m); "
            "from specsched.runtime.child import main; sys.exit(main())")
    return [sys.executable, "-c", boot]


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted()


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(no output)"
