"""uvicorn serving the app on a socket we bound, in a thread: `serve`, the tests and the load test.

Binding the socket ourselves makes a port that is taken one clear line before anything is served (uvicorn
would log it and exit the process), lets port 0 pick a free port whose number we can read, and leaves the
main thread's signals to the command (uvicorn installs no handlers off the main thread).
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from ...core.config import ConfigError

START_TIMEOUT_S = 30.0


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (0: a free port); ConfigError if it cannot be had."""
    if not (isinstance(port, int) and 0 <= port <= 65535):
        raise ConfigError(f"--port must be in 0..65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"--host {host}: {exc.strerror or exc}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class Server:
    """The app served over HTTP/1.1 until `stop()`; `url` is where (http://host:port)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, *, sock: socket.socket | None = None) -> None:
        """`sock`: one `bind` made already (the command binds before the models load: a taken port costs
        nothing)."""
        self.sock = sock or bind(host, port)
        self.host, self.port = host, self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]},
                                        name="specsched-serve", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Server:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server on {self.url} did not start")
            time.sleep(0.01)
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop taking connections, let open ones end (at most timeout_graceful_shutdown), join."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self.sock.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
