"""The processes a test starts, watches and kills: a CLI run with every descendant it ever had recorded
(so a test can tell which survived it), and SIGKILL of one of the engine's processes mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
from cli_runs import cli_command


def kill_one(rows: list[dict], rng, killed: set[int]) -> bool:
    """SIGKILL one of `rows` (the engine's process-table rows) at random, remembering its pid in `killed`;
    False when it had exited on its own meanwhile."""
    pid = rng.choice(rows)["pid"]
    killed.add(pid)
    try:
        psutil.Process(pid).kill()
        return True
    except psutil.NoSuchProcess:
        return False


def kill_the_verifier_once_it_commits(engine, job, *, timeout_s: float = 60) -> None:
    """SIGKILL the engine's verifier as soon as `job`'s first sequence has committed a token."""
    deadline = time.monotonic() + timeout_s
    while not job.collected.tokens.get(0):
        assert time.monotonic() < deadline, f"nothing committed in {timeout_s} s"
        time.sleep(0.01)
    psutil.Process(next(p["pid"] for p in engine.processes if p["name"] == "verifier")).kill()


def _still_running(p: psutil.Process) -> bool:
    # is_running() also compares the start time, so a recycled pid does not count as a survivor.
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def with_faulthandler() -> dict[str, str]:
    """This process's environment as it is now (a test may have set a variable), with faulthandler on: a CLI
    that hangs can then be asked where its threads are (SIGABRT prints every thread's stack)."""
    return {**os.environ, "PYTHONFAULTHANDLER": "1"}


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Watched:
    """A CLI process started in the background, with every descendant it ever had recorded.

    ``sigint_ignored``: start it with SIGINT ignored, as a shell without job control starts a
    background job (``specsched run ... &`` in a script). Used as ``with Watched(...) as w:``, whatever is
    still running when the block ends (a step failed) is killed."""

    def __init__(self, *args: str, sigint_ignored: bool = False) -> None:
        self.proc = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=with_faulthandler(),
                                     preexec_fn=_ignore_sigint if sigint_ignored else None)
        self.seen: dict[int, psutil.Process] = {}
        self.stdout = self.stderr = ""

    def poll_children(self) -> int:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        return len(self.seen)

    def wait_for_children(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.poll_children() < n:
            assert self.proc.poll() is None, f"exited early ({self.proc.returncode}): {self.finish()[1]}"
            assert time.monotonic() < deadline, f"saw {len(self.seen)} of {n} child processes"
            time.sleep(0.01)

    def watch_until_exit(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.poll_children()
            if time.monotonic() > deadline:
                raise AssertionError(f"the CLI did not exit in {timeout} s; where its threads were:\n{self.stacks()}")
            time.sleep(0.01)

    def stacks(self) -> str:
        """Every thread's stack of a CLI that hangs (faulthandler's dump on SIGABRT), and its stderr so far."""
        self.proc.send_signal(signal.SIGABRT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill_all()
            return "(no dump within 30 s)"
        return err

    def signal(self, signum: int = signal.SIGINT) -> None:
        os.kill(self.proc.pid, signum)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the CLI did not exit in {timeout} s; where its threads were:\n{self.stacks()}") \
                from None
        self.stdout, self.stderr = out, err
        return self.proc.returncode, out, err

    def survivors(self, grace: float = 10) -> list[psutil.Process]:
        """Children recorded while the CLI ran that still exist after it exited (a few seconds' grace)."""
        _, alive = psutil.wait_procs(list(self.seen.values()), timeout=grace)
        return [p for p in alive if _still_running(p)]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:  # a step failed with the CLI still running: take it all down
            self.kill_all()

    def kill_all(self) -> None:
        for p in [*self.seen.values()]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.kill()
        self.proc.wait()


class WatchedCommand(Watched):
    """Watched, for a subcommand other than `run`: `specsched ARGS`, its output read as it comes (so a test
    can wait for a line, e.g. the phase a signal should land in)."""

    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "specsched", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
        self.seen = {}
        self.stdout = self.stderr = ""
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=lambda f=f, to=to: to.extend(f), daemon=True)
                        for f, to in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    def wait_for_line(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.out):
            assert self.proc.poll() is None, f"exited early ({self.proc.returncode}): {''.join(self.err)}"
            assert time.monotonic() < deadline, f"no line with {text!r} in {timeout} s"
            time.sleep(0.01)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        for r in self.readers:
            r.join(timeout=10)
        self.stdout, self.stderr = "".join(self.out), "".join(self.err)
        return self.proc.returncode, self.stdout, self.stderr
