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

import importlib
import json
import os
import selectors
import signal
import sys
import traceback

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
            # lazy: the backend's modules, named by the engine (hf: torch + transformers, ~11 s of start-up, measured
            # 2026-11-27), imported here once for every child to share
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


if __name__ == "__main__":
    sys.exit(main())
