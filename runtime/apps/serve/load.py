"""The load test's clients: streaming completions arriving as a Poisson process, at most N in flight.

Every request is a streaming `/v1/completions` with usage at the end; what a client sees is kept per
request: when it was sent, when each piece of text came, the tokens the server counted, the response id.
A request is served when its stream ends with `[DONE]` after every choice ended; lost when it did not
(an error status, a stream cut short); duplicated when its response id was seen on another request, or a
choice ended twice. One client (`kill`) asks for a long answer (`KILLED_TOKENS`) and hangs up after its
first piece, so that it is cut off mid-stream however fast the others' answers come: its job must be
cancelled and its workers freed, which the caller checks on the engine.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

MAX_REQUESTS = 1000   # a benchmark, not a soak test: bounded in count ...
MAX_CLIENTS = 64
KILLED_TOKENS = 1000  # the killed client's budget: far more than arrives before it hangs up


@dataclass(slots=True)
class Seen:
    """What one client saw of its request (monotonic seconds)."""

    index: int
    sent: float = 0.0
    pieces: list[float] = field(default_factory=list)   # when each non-empty text piece arrived
    tokens: int = 0
    ids: set[str] = field(default_factory=set)
    ended: int = 0                                       # choices that ended (finish_reason seen)
    done: bool = False                                   # the stream's [DONE]
    status: int = 0
    killed: bool = False
    error: str = ""
    text: str = ""

    @property
    def served(self) -> bool:
        return self.status == 200 and self.done and self.ended == 1 and not self.killed

    @property
    def ttft(self) -> float | None:
        return self.pieces[0] - self.sent if self.pieces else None

    @property
    def itl(self) -> float | None:
        """Mean time between tokens after the first: (last piece - first piece) / (tokens - 1)."""
        if len(self.pieces) < 2 or self.tokens < 2:
            return None
        return (self.pieces[-1] - self.pieces[0]) / (self.tokens - 1)


@dataclass(frozen=True, slots=True)
class Load:
    requests: int
    clients: int
    rate: float            # arrivals per second
    max_tokens: int
    prompts: tuple[str, ...]
    model: str
    seed: int = 0
    kill: int | None = None   # the request whose client hangs up mid-stream

    def __post_init__(self) -> None:
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise ValueError(f"--requests must be in 1..{MAX_REQUESTS}, got {self.requests}")
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ValueError(f"--clients must be in 1..{MAX_CLIENTS}, got {self.clients}")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"--rate must be requests per second > 0, got {self.rate}")
        if not self.prompts:
            raise ValueError("a load needs prompts")

    def arrivals(self) -> list[float]:
        """Seconds after the start: exponential gaps of mean 1/rate, seeded."""
        rng, t, out = random.Random(self.seed), 0.0, []
        for _ in range(self.requests):
            out.append(t)
            t += rng.expovariate(self.rate)
        return out

    def body(self, i: int) -> dict:
        """Request i: its prompt in turn, a priority of 0-2 (the priority policy has something to order)."""
        budget = KILLED_TOKENS if i == self.kill else self.max_tokens
        return {"model": self.model, "prompt": self.prompts[i % len(self.prompts)], "max_tokens": budget,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                "specsched": {"priority": random.Random(self.seed * 7919 + i).randrange(3)}}


async def play(url: str, load: Load, timeout_s: float) -> list[Seen]:
    """Send the load to `url`; every request gets `timeout_s` at most."""
    # lazy: httpx, ~0.11 s of start-up (measured 2026-11-27) that `specsched --help` would pay: bench's parser
    # imports this module
    import httpx

    gate, start = asyncio.Semaphore(load.clients), time.monotonic()
    limits = httpx.Limits(max_connections=load.clients, max_keepalive_connections=load.clients)
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as client:
        async def one(i: int, at: float) -> Seen:
            await asyncio.sleep(max(start + at - time.monotonic(), 0.0))
            async with gate:
                seen = Seen(i, sent=time.monotonic())
                try:
                    await asyncio.wait_for(_stream(client, load, seen), timeout_s)
                except (httpx.HTTPError, asyncio.TimeoutError, ValueError) as exc:
                    seen.error = f"{type(exc).__name__}: {exc}"
                return seen

        return await asyncio.gather(*(one(i, at) for i, at in enumerate(load.arrivals())))


async def _stream(client: httpx.AsyncClient, load: Load, seen: Seen) -> None:
    async with client.stream("POST", "/v1/completions", json=load.body(seen.index)) as r:
        seen.status = r.status_code
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                seen.done = True
                continue
            chunk = json.loads(line[6:])
            seen.ids.add(chunk.get("id", ""))
            if chunk.get("usage"):
                seen.tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                if choice.get("text"):
                    seen.pieces.append(time.monotonic())
                    seen.text += choice["text"]
                seen.ended += choice.get("finish_reason") is not None
            if seen.index == load.kill and seen.pieces:
                seen.killed = True
                return  # leaving the block closes the connection mid-stream


def duplicated(seen: list[Seen]) -> int:
    """Requests that got another's response id, or more than one end for their one choice."""
    owners: dict[str, int] = {}
    for s in seen:
        for i in s.ids:
            owners[i] = owners.get(i, 0) + 1
    return sum(any(owners[i] > 1 for i in s.ids) or s.ended > 1 or len(s.ids) > 1 for s in seen)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank), None without values."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, math.ceil(q / 100 * len(ranked)) - 1))]
