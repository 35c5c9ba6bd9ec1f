"""The OpenAI response objects the server sends, whole or as Server-Sent Events.

`text_completion` / `chat.completion` for a whole answer; `text_completion` / `chat.completion.chunk`
events while streaming, ended by `data: [DONE]` as OpenAI's are. A choice's index is i * n + j for
prompt i's j-th sample.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field

DONE = b"data: [DONE]\n\n"


@dataclass(slots=True)
class Answer:
    """One response's identity; the same id on every chunk of a stream."""

    kind: str                 # "completion" | "chat"
    model: str
    id: str = field(default_factory=lambda: f"cmpl-{secrets.token_hex(12)}")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if self.kind not in ("completion", "chat"):
            raise ValueError(f"kind is completion or chat, got {self.kind!r}")
        if self.kind == "chat":
            self.id = "chat" + self.id

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, texts: list[str], reasons: list[str | None], usage: dict) -> dict:
        """The answer in one object (stream: false)."""
        if self.kind == "chat":
            choices = [{"index": i, "message": {"role": "assistant", "content": t}, "logprobs": None,
                        "finish_reason": r} for i, (t, r) in enumerate(zip(texts, reasons))]
            return {**self._head("chat.completion"), "choices": choices, "usage": usage}
        choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": r}
                   for i, (t, r) in enumerate(zip(texts, reasons))]
        return {**self._head("text_completion"), "choices": choices, "usage": usage}

    def chunk(self, index: int, text: str, reason: str | None, *, first: bool = False) -> dict:
        """One streamed piece of choice `index` (`first`: a chat stream's opening, which names the role)."""
        if self.kind == "chat":
            delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            return {**self._head("chat.completion.chunk"),
                    "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}]}
        return {**self._head("text_completion"),
                "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": reason}]}

    def usage_chunk(self, usage: dict) -> dict:
        """stream_options.include_usage: the last chunk, with no choices."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": usage}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def event(data: dict) -> bytes:
    """One Server-Sent Event; json.dumps escapes newlines, so the payload is one `data:` line."""
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def models_list(model: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "specsched"}]}
