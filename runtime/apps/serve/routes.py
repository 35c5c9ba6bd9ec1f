"""The HTTP API (Starlette): /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics.

Every refusal is an `ApiError` answered here, in OpenAI's error shape; anything else that goes wrong in a
handler is a 500 with a server_error body and one log line, and the engine goes on. A request is a job: a
client that goes away (its connection closes) gets its job cancelled, which frees the job's workers.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import time
import traceback
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...core.config import RunConfig
from ...engine.engine import Engine, Job
from .answer import answer_stream, answer_whole
from .errors import ApiError
from .follow import Follower
from .job import Jobs
from .metrics import ServeMetrics
from .requests import Limits, parse_body, parse_request
from .shapes import models_list

OPEN = ("/health",)  # answered without the API key: a load balancer's probe holds no key


class ServeApp:
    """One engine behind the API. `log(line)` is told one line per finished request (the server's log);
    `on_job(job, config)` each job a request became, once submitted (the live view, `--trace`)."""

    def __init__(self, engine: Engine, defaults: RunConfig, *, model: str, limits: Limits | None = None,
                 api_key: str | None = None, log: Callable[[str], None] | None = None,
                 on_job: Callable[[Job, RunConfig], None] | None = None) -> None:
        if api_key is not None and not api_key:
            raise ValueError("an API key, if given, is not empty")
        self.engine, self.model, self.limits = engine, model, limits or Limits()
        self._key = None if api_key is None else api_key.encode()
        self.jobs, self.metrics = Jobs(engine, defaults), ServeMetrics(engine)
        self.log = log or (lambda line: None)
        self.on_job = on_job or (lambda job, config: None)
        self.created = int(time.time())
        routes = [Route("/v1/completions", self._counted("completions", self.completion), methods=["POST"]),
                  Route("/v1/chat/completions", self._counted("chat", self.chat), methods=["POST"]),
                  Route("/v1/models", self._counted("models", self.models), methods=["GET"]),
                  Route("/health", self._counted("health", self.health), methods=["GET"]),
                  Route("/metrics", self._counted("metrics", self.scrape), methods=["GET"])]
        self.app = Starlette(routes=routes, exception_handlers={HTTPException: self._http_error})

    # -- the routes ----------------------------------------------------------------------------------
    async def completion(self, request: Request) -> Response:
        return await self._complete(request, "completion")

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, "chat")

    async def models(self, request: Request) -> Response:
        return JSONResponse(models_list(self.model, self.created))

    async def health(self, request: Request) -> Response:
        if broken := self.engine.broken:
            raise ApiError(503, f"the engine cannot run jobs: {broken}", None, "engine_down")
        return JSONResponse({"status": "ok"})

    async def scrape(self, request: Request) -> Response:
        return Response(await run_in_threadpool(self.metrics.render), media_type=CONTENT_TYPE_LATEST)

    async def _complete(self, request: Request, kind: str) -> Response:
        arrival = time.monotonic()
        req = parse_request(parse_body(await self._body(request)), kind, self.limits)
        if req.model != self.model:
            raise ApiError(404, f"the model {req.model!r:.80} does not exist; this server serves {self.model!r}",
                           "model", "model_not_found")
        job, cfg = await run_in_threadpool(self.jobs.submit, req)
        self.on_job(job, cfg)
        depth = 0 if cfg.target_only else cfg.shape.pct_depth if cfg.shape.tree == "pct" else len(cfg.shape.widths)
        follower = Follower(self.engine, job, arrival=arrival, stops=req.stop, budget=cfg.max_new_tokens,
                            metrics=self.metrics, depth=depth)
        self.metrics.prompt_tokens.inc(sum(job.prompt_tokens))
        self.metrics.active.add(follower)
        watcher = asyncio.create_task(_watch_disconnect(request, follower))
        ended = functools.partial(self._ended, req, follower, watcher)  # once, however the answer ends
        if req.stream:
            return answer_stream(req, self.model, follower, ended)
        try:
            return await answer_whole(req, self.model, follower)
        finally:
            ended()

    def _ended(self, req, follower: Follower, watcher: asyncio.Task) -> None:
        watcher.cancel()
        follower.close()
        self.metrics.active.discard(follower)
        self.metrics.generated.inc(sum(t.tokens for t in follower.texts))
        first = "—" if follower.first_token_s is None else f"{follower.first_token_s:.3f} s"
        reasons = ",".join(sorted({t.finish_reason or "?" for t in follower.texts}))
        why = "client gone" if follower.gone and not follower.ended else follower.error() or reasons
        self.log(f"{req.kind:<10} job {follower.job.id:<5} n={req.sequences} tokens="
                 f"{sum(t.tokens for t in follower.texts):<5} first token {first:>9}  total "
                 f"{follower.elapsed():.3f} s  {'stream' if req.stream else 'whole '}  {why}")

    async def _body(self, request: Request) -> bytes:
        """The body, refused with 413 past the limit without reading the rest."""
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):  # 18 digits: int() is cheap
            raise ApiError(413, f"the body is {declared:.20} bytes; this server takes {limit:,} at most",
                           None, "body_too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is over {limit:,} bytes, the most this server takes", None,
                               "body_too_large")
            chunks.append(chunk)
        return b"".join(chunks)

    # -- answering -----------------------------------------------------------------------------------
    def _counted(self, route: str, handler):
        async def endpoint(request: Request) -> Response:
            try:
                self._authorise(request)
                response = await handler(request)
            except ApiError as exc:
                response = self._error(exc)
            except Exception:  # a bug of ours: one log line and a 500, the engine and the server go on
                self.log("500 " + traceback.format_exc(limit=-3).strip().replace("\n", " | "))
                response = self._error(ApiError(500, "internal error (the server's log says where)", None,
                                                "server_error"))
            self.metrics.requests.labels(route, str(response.status_code)).inc()
            return response
        return endpoint

    def _authorise(self, request: Request) -> None:
        if self._key is None or request.url.path in OPEN:
            return
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip().encode()
        if not hmac.compare_digest(given, self._key):  # constant time: the key is not guessed byte by byte
            raise ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", None, "invalid_api_key")

    def _error(self, exc: ApiError) -> Response:
        if 400 <= exc.status < 500:
            self.metrics.refusals.labels(exc.code or str(exc.status)).inc()
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body, status_code=exc.status, headers=headers)

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        """The router's own refusals (no such route, wrong method) in OpenAI's shape."""
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        response = self._error(ApiError(exc.status_code if exc.status_code >= 400 else 400,
                                        f"{request.method} {request.url.path}: {exc.detail}", None, code))
        self.metrics.requests.labels("other", str(response.status_code)).inc()
        return response


async def _watch_disconnect(request: Request, follower: Follower) -> None:
    """Marks the follower gone when the client closes its connection (the body has been read by now, so
    the next message the server receives is the disconnect)."""
    while True:
        try:
            message = await request.receive()
        except Exception:  # the server has let the connection go: nobody is listening any more
            message = {"type": "http.disconnect"}
        if message["type"] == "http.disconnect":
            follower.gone = True
            return
