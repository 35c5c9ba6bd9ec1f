"""The engine's start, held: its thread binds its sockets and starts the zygote (which imports the backend's
modules, seconds with torch and transformers), then waits, while the engine checks its input in its own
thread, for ``go()`` (fork the verifier, take jobs) or ``stop()`` (nothing else starts). A mixin of the
Dispatcher: it shares the dispatcher's gate, inbox and wake pipe.

However the thread ends, even before its sockets exist, ``go()`` learns why: ConfigError for an address it
could not listen on (``--listen`` on a port another process holds), RuntimeError otherwise.
"""

from __future__ import annotations

import os
import select

import zmq

from ..core.config import ConfigError

LOOK_S = 0.1  # go() and stop() wake a held thread through the pipe; this bounds a wake-up it missed


class HeldStart:
    def go(self) -> None:
        """Start the verifier and take jobs. If the engine's thread has ended instead, raise why: ConfigError
        for an address it could not listen on, RuntimeError otherwise."""
        self.held.wait()
        with self.gate:
            if self.closing:
                raise self.failure or RuntimeError("the engine stopped before it started")
            self.released.set()
            os.write(self.wake_w, b"g")

    def _thread(self) -> None:
        """However the thread ends (even before its sockets exist), go() and submit() learn it."""
        try:
            self._main()
        except BaseException as exc:
            self.failure = self.failure or RuntimeError(f"engine failure: {type(exc).__name__}: {exc}")
            if self.released.is_set():  # before go(), go() raises it to the engine's caller instead
                raise
        finally:
            with self.gate:
                self.closing = True
            self.held.set()

    def _bind(self, endpoints) -> None:
        for sock, address in ((self.sink, endpoints.telemetry), (self.control, endpoints.control)):
            try:
                sock.bind(endpoints.bind(address))
            except zmq.ZMQError as exc:  # --listen HOST:PORT that another process holds, say
                where = f"--listen {self.config.listen}" if self.config.listen and sock is self.control else address
                raise ConfigError(f"{where}: cannot listen there: {zmq.strerror(exc.errno)}") from None

    def _released(self) -> bool:
        """Wait for `go()` (True) or a `stop()` (False); anything else posted meanwhile waits for the loop."""
        self.held.set()
        kept = []
        try:
            while not self.released.is_set():
                if select.select([self.wake_r], [], [], LOOK_S)[0]:
                    os.read(self.wake_r, 4096)
                while not self.inbox.empty():
                    message = self.inbox.get()
                    if message[0] == "stop":
                        return False
                    kept.append(message)
            return True
        finally:
            for message in kept:
                self.inbox.put(message)
