"""A `specsched serve` in this process, for the tests: an engine, the app and uvicorn on a free port of
127.0.0.1, always shut down (the engine's processes too) when the block ends."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass

from helpers import FAST

from specsched.runtime.apps.serve.requests import Limits
from specsched.runtime.apps.serve.routes import ServeApp
from specsched.runtime.apps.serve.server import Server
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine

SIM = RunConfig.of(backend="sim", max_new_tokens=16, **FAST)
PROMPT = "kaka lomi nene"


@dataclass
class Served:
    engine: Engine
    app: ServeApp
    server: Server
    model: str

    @property
    def url(self) -> str:
        return self.server.url

    def drafting(self) -> list[dict]:
        """The engine's draft workers drafting for a job now."""
        return [p for p in self.engine.processes if p["role"] == "draft" and p["state"] == "drafting"]


@contextlib.contextmanager
def served(config: RunConfig = SIM, *, model: str = "sim", limits: Limits | None = None, api_key: str | None = None,
           prestart: int = 1) -> Iterator[Served]:
    with Engine(dataclasses.replace(config, workers=1)) as engine:
        if prestart:
            engine.start_workers(prestart)
        app = ServeApp(engine, config, model=model, limits=limits, api_key=api_key)
        with Server(app.app) as server:
            yield Served(engine, app, server, model)


def wait_for(check, timeout: float = 120.0, what: str = "the condition") -> None:
    """Poll `check()` until it is true: generous, so that a busy machine is slow, not failing."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.05)
