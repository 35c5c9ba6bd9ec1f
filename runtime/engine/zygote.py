"""The zygote: one pre-warmed interpreter per engine that forks every child the engine starts.

Why: a child started as a fresh interpreter imports torch and transformers, ~2.4 s of CPU each, so the
verifier plus three draft workers importing at once take ~6 s of a 2-core machine before any model
loads. The zygote (Android's name for the same trick) is started once per engine as a fresh
interpreter, imports what every child needs, and then forks one child per request: a fork costs
milliseconds and the imported pages are shared copy-on-write.

Why forking is safe here: the zygote is itself spawned (nothing inherited from the threaded engine),
runs a single Python thread, never opens a ZeroMQ context, never touches CUDA and never runs a torch
op (so no OpenMP pool exists for a fork to break). Each child sets its own thread count after the fork.

Protocol, JSON lines on pipes (no pickle): the first line names the modules to preload; then one
line per child ``{"spec", "log", "env", "threads"}``. The zygote answers ``{"pid"}`` at once and
``{"exit", "code"}`` when it reaps the child (``code`` as subprocess reports it: -N for signal N).
EOF on its stdin: SIGKILL what is left, reap it, exit. The zygote dies with the engine's thread
(PR_SET_PDEATHSIG), and its children die with it the same way; if it dies alone, the engine starts a
new one and restarts the children (supervisor.py).
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from ..core.process import die_with_parent, set_title
from .child import serve


def main() -> int:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the engine's
    set_title("specsched: zygote")
    reply = os.dup(1)         # the protocol's channel; fd 1 and 2 become the zygote's log
    os.dup2(2, 1)
    stdin = os.fdopen(0, "rb", buffering=0)
    first = json.loads(_read_line(stdin) or b"{}")
    for module in first.get("preload", []):
        try:
            # lazy: the backend's modules, named by the engine (hf: torch + transformers, TORCH_S of start-up,
            # measured 2026-11-27), imported here once for every child to share
            importlib.import_module(module)
        except Exception:  # the child that needs it imports it again and reports the error itself
            traceback.print_exc()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD writes to the wake pipe
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    pending = b""
    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                continue
            data = os.read(0, 1 << 16)
            if not data:                      # the engine closed us (or is gone): nothing may outlive it
                for pid in children:
                    _signal(pid, signal.SIGKILL)
                _reap(children, reply, block=True)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)  # no interpreter teardown: with torch and transformers loaded it takes ~1.8 s
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    pid = _fork(json.loads(line), (reply, wake_r, wake_w))
                    children.add(pid)
                    _send(reply, {"pid": pid})
        _reap(children, reply, block=False)


def _fork(request: dict, inherited: tuple[int, ...]) -> int:
    spec = {**request["spec"], "ppid": os.getpid()}
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: its own log, its own signals, its thread count; then the child's main
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.environ.update(request["env"])
        torch = sys.modules.get("torch")
        if torch is not None:  # OMP_NUM_THREADS was read when torch loaded in the zygote: set it anew
            torch.set_num_threads(int(request["threads"]))
        code = serve(spec)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(children: set[int], reply: int, *, block: bool) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(reply, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(fd: int, message: dict) -> None:
    try:
        os.write(fd, json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the engine is gone; its children are being killed with it


def _read_line(stream) -> bytes:
    out = b""
    while not out.endswith(b"\n"):
        byte = stream.read(1)
        if not byte:
            break
        out += byte
    return out


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# -- the engine's side ------------------------------------------------------------------------------
class Zygote:
    """The engine's handle on its zygote: `fork` a child, learn its pid and, later, its exit status."""

    def __init__(self, log: Path, preload: list[str], env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command("specsched.runtime.engine.zygote"), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=out, env=env, start_new_session=True)
        self._lock = threading.Lock()
        self.closed = False  # closed by the engine: its end is not a death
        self.gone = False    # its pipe reached EOF: it exited, and every child it forked died with it
        self._unanswered: collections.deque[Forked] = collections.deque()
        self._by_pid: dict[int, Forked] = {}
        self._write({"preload": preload})
        threading.Thread(target=self._read, name="specsched-zygote", daemon=True).start()

    def fork(self, spec: dict, log: Path, env: dict[str, str], threads: int) -> Forked:
        child = Forked()
        with self._lock:  # replies come in request order: queue the handle before the request leaves
            self._unanswered.append(child)
            try:
                self._write({"spec": spec, "log": str(log), "env": env, "threads": threads})
            except OSError:  # the zygote is gone: so is every child it would have started
                self._unanswered.remove(child)
                child.answer(-1)
                child.exited(-signal.SIGKILL)
        return child

    @property
    def died(self) -> bool:
        """It exited without being closed (killed, or it crashed)."""
        return self.gone and not self.closed

    def close(self, grace: float = 3.0) -> None:
        """EOF: the zygote kills whatever is left (the engine stopped its children before), then exits."""
        self.closed = True
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _write(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._lock:
                if "pid" in message:
                    child = self._unanswered.popleft()
                    self._by_pid[message["pid"]] = child
                    child.answer(message["pid"])
                else:
                    self._by_pid.pop(message["exit"]).exited(message["code"])
        with self._lock:  # EOF: the zygote died, and PR_SET_PDEATHSIG killed its children with it
            self.gone = True
            for child in [*self._unanswered, *self._by_pid.values()]:
                child.with_zygote = True
                child.answer(-1)
                child.exited(-signal.SIGKILL)
            self._unanswered.clear()
            self._by_pid.clear()


class Forked:
    """What the process table needs of a child it did not fork itself (subprocess.Popen's names)."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self.returncode: int | None = None
        self.with_zygote = False  # it died because its zygote did
        self._known, self._done = threading.Event(), threading.Event()

    def answer(self, pid: int) -> None:
        if self._pid is None:
            self._pid = pid
            self._known.set()

    def exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    @property
    def pid(self) -> int:
        """Blocks until the zygote has forked it (at an engine's start, until the zygote has preloaded)."""
        self._known.wait()
        return self._pid

    @property
    def known_pid(self) -> int | None:
        return self._pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("specsched child", timeout)
        return self.returncode


def command(module: str) -> list[str]:
    """A fresh interpreter running `module`'s main(), importing specsched from wherever this process
    found it: a wheel, an editable install and bin/specsched running from a checkout alike."""
    pkg = sys.modules["specsched"]
    boot = ("import importlib.util as u, sys; "
            f"s = u.spec_from_file_location('specsched', {pkg.__file__!r}, "
            f"submodule_search_locations={list(pkg.__path__)!r}); "
            "m = u.module_from_spec(s); sys.modules['specsched'] = m; s.loader.exec_module(m); "
            f"from {module} import main; sys.exit(main())")
    return [sys.executable, "-c", boot]


if __name__ == "__main__":
    sys.exit(main())
