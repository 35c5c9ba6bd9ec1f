"""A followed job answered: whole (one JSON object when it ends) or streamed (Server-Sent Events as the
verifier commits). Either way the job is let go exactly once, however the answer ends: `ended` cancels it
if it still runs, counts it and logs its line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from starlette.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from .errors import ApiError
from .follow import Follower
from .requests import CompletionRequest
from .shapes import DONE, Answer, event, usage


def _usage(follower: Follower) -> dict:
    return usage(sum(follower.job.prompt_tokens), sum(t.tokens for t in follower.texts))


def _failure(follower: Follower) -> ApiError | None:
    if why := follower.error():
        return ApiError(500, f"the job failed: {why}", None, "job_failed")
    return None


async def answer_whole(req: CompletionRequest, model: str, follower: Follower) -> JSONResponse:
    async for _ in follower.deltas():
        pass
    if follower.gone and not follower.ended:  # nobody reads this; the status says why in the server's counts
        raise ApiError(400, "the client closed the connection before the answer", None, "client_closed")
    if failure := _failure(follower):
        raise failure
    answer = Answer(req.kind, model)
    return JSONResponse(answer.whole([t.sent for t in follower.texts], [t.finish_reason for t in follower.texts],
                                     _usage(follower)))


def answer_stream(req: CompletionRequest, model: str, follower: Follower, ended: Callable[[], None]) -> JobStream:
    answer = Answer(req.kind, model)

    async def events() -> AsyncIterator[bytes]:
        if req.kind == "chat":  # OpenAI's chat streams open each choice with the assistant's role
            for i in range(req.sequences):
                yield event(answer.chunk(i, "", None, first=True))
        async for news in follower.deltas():
            for i, delta, end in news:
                yield event(answer.chunk(i, delta, end))
        if follower.gone and not follower.ended:
            return
        if failure := _failure(follower):  # the stream has begun (200): the error comes as an event
            yield event(failure.body)
        if req.include_usage:
            yield event(answer.usage_chunk(_usage(follower)))
        yield DONE

    return JobStream(events(), ended)


class JobStream(StreamingResponse):
    """A stream that lets its job go when it ends: finished, or cut off by the client (however Starlette
    and the server learn of it, the response's own call returns or raises)."""

    def __init__(self, body: AsyncIterator[bytes], ended: Callable[[], None]) -> None:
        super().__init__(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._ended()
