"""The engine thread's inbox: what other threads hand it (submissions, cancellations, prestarts, stop),
and its held start.

The engine's thread binds its sockets and starts the zygote (which imports the backend's modules, seconds
with torch and transformers), then waits, while the engine checks its input in its own thread, for
``go()`` (fork the verifier, take jobs) or ``stop()`` (nothing else starts). Messages wake the thread
through a pipe, which its poller watches beside the sockets.
"""

from __future__ import annotations

import os
import queue
import select
import threading

LOOK_S = 0.1  # go() and stop() wake a held thread through the pipe; this bounds a wake-up it missed


class Inbox:
    """Owns the queue, the wake pipe and the gate: a submit is either queued before the loop ends, or refused
    (``post`` says False once the inbox is ``closed``); and the held start's two events."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self.wake_w = os.pipe()
        self.gate = threading.Lock()
        self.closed = False
        self.held = threading.Event()      # the thread waits for go() (or has ended)
        self.released = threading.Event()  # go() was called

    # -- other threads ------------------------------------------------------------------------------------
    def post(self, kind: str, arg) -> bool:
        with self.gate:
            if self.closed:
                return False
            self.queue.put((kind, arg))
            os.write(self.wake_w, b".")
            return True

    def post_stop(self, reason: str | None) -> None:
        with self.gate:
            if not self.closed:
                self.queue.put(("stop", reason))
                os.write(self.wake_w, b"x")

    def release(self) -> bool:
        """go(): once the thread is held (or has ended), let it start; False if it has ended instead."""
        self.held.wait()
        with self.gate:
            if self.closed:
                return False
            self.released.set()
            os.write(self.wake_w, b"g")
            return True

    # -- the engine's thread --------------------------------------------------------------------------
    def wait_released(self) -> bool:
        """Wait for `go()` (True) or a `stop()` (False); anything else posted meanwhile waits for the loop."""
        self.held.set()
        kept = []
        try:
            while not self.released.is_set():
                if select.select([self.wake_r], [], [], LOOK_S)[0]:
                    os.read(self.wake_r, 4096)
                while not self.queue.empty():
                    message = self.queue.get()
                    if message[0] == "stop":
                        return False
                    kept.append(message)
            return True
        finally:
            for message in kept:
                self.queue.put(message)

    def woken(self) -> None:
        os.read(self.wake_r, 4096)

    def take(self):
        """Every message posted so far, in order: (kind, arg)."""
        while not self.queue.empty():
            yield self.queue.get()

    def close(self) -> None:
        """From here on `post` refuses: nothing queued later could ever run."""
        with self.gate:
            self.closed = True

    def close_pipe(self) -> None:
        os.close(self.wake_r)
        os.close(self.wake_w)

    def end(self) -> None:
        """The thread has ended: refuse, and release a go() that waits (it learns why)."""
        self.close()
        self.held.set()
