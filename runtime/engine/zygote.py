"""The engine's handle on its zygote (zygote_main.py: what the zygote is, why, and its protocol): start it, ask it
to fork a child, learn the child's pid and, later, its exit status."""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path


class Zygote:
    """The engine's handle on its zygote: `fork` a child, learn its pid and, later, its exit status."""

    def __init__(self, log: Path, preload: list[str], env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command("specsched.runtime.engine.zygote_main"), stdin=subprocess.PIPE,
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
