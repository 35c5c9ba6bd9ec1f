"""A completion or chat request's JSON, checked field by field, and the job it becomes.

Fields absent take the server's run flags (`--max-new-tokens`, `--temperature`, ...), so that a request
with none of them decodes exactly as `specsched run` with the same flags. A field the server cannot honour
(logprobs, penalties, a suffix) is refused with a 400, never silently ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ...core.config_checks import is_int, is_number, not_utf8
from .errors import ApiError, bad, wrong_type
from .extension import NAME, Extension, parse_extension

MAX_STOPS = 4                    # as OpenAI's API
MAX_SEED = 2**63 - 1
COMMON = {"model", "n", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options",
          "logprobs", "user", "frequency_penalty", "presence_penalty", "logit_bias", NAME}
KNOWN = {"completion": COMMON | {"prompt", "echo", "best_of", "suffix"},
         "chat": COMMON | {"messages", "max_completion_tokens", "top_logprobs"}}
# OpenAI fields accepted only at the value that changes nothing (what the openai package sends when unset)
NEUTRAL = {"frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "logit_bias": ({},), "echo": (False,),
           "best_of": (1,), "suffix": ("",), "logprobs": (False, 0), "top_logprobs": (0,)}
ROLES = ("system", "user", "assistant")


@dataclass(slots=True, frozen=True)
class Limits:
    """What one request may ask for at most (`serve --max-body-bytes`, `--max-tokens-limit`, `--max-n`)."""
    max_body_bytes: int = 1 << 20
    max_tokens: int = 4096
    max_n: int = 16

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_tokens", "max_n"):
            if not (is_int(getattr(self, name)) and getattr(self, name) >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")


@dataclass(slots=True, frozen=True)
class CompletionRequest:
    kind: str                          # "completion" | "chat"
    model: str
    prompts: tuple[str, ...]           # a completion's prompt(s); a chat's one conversation
    messages: tuple[dict, ...] | None  # chat: the conversation as given
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False        # stream_options.include_usage: a last chunk with the token counts
    extension: Extension = Extension()

    @property
    def sequences(self) -> int:
        """Sequences the job decodes: n per prompt, a chat's conversation being one (choice i*n + j is prompt
        i's j-th)."""
        return max(len(self.prompts), 1) * self.n


def parse_body(body: bytes) -> dict:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; deep nesting a RecursionError
        raise ApiError(400, "the body is not valid JSON", None, "invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object", None, "invalid_json")
    return data


def parse_request(data: dict, kind: str, limits: Limits) -> CompletionRequest:
    """The request, or ApiError (400) naming the first bad field."""
    if unknown := sorted(set(data) - KNOWN[kind]):
        raise bad(unknown[0], "not supported by this server (see docs/serve.md)", "unsupported_field")
    for name, neutral in NEUTRAL.items():
        if data.get(name) is not None and not any(data[name] == v and type(data[name]) is type(v) for v in neutral):
            raise bad(name, f"not supported: only {neutral[0]!r} (or leaving it out) is accepted",
                      "unsupported_value")
    model = data.get("model")
    if not isinstance(model, str):
        raise wrong_type("model", "a model id (a string; GET /v1/models lists it)", model)
    prompts, messages = (_prompts(data.get("prompt")), None) if kind == "completion" else _chat(data.get("messages"))
    budget = data.get("max_completion_tokens", data.get("max_tokens")) if kind == "chat" else data.get("max_tokens")
    stream_options = data.get("stream_options")
    if stream_options is not None and not (isinstance(stream_options, dict) and set(stream_options) <= {"include_usage"}
                                           and isinstance(stream_options.get("include_usage", False), bool)):
        raise wrong_type("stream_options", 'an object {"include_usage": true|false}', stream_options)
    return CompletionRequest(
        kind=kind, model=model, prompts=prompts, messages=messages,
        n=_int(data.get("n"), "n", 1, limits.max_n) or 1,
        max_tokens=_int(budget, "max_tokens", 1, limits.max_tokens),
        temperature=_number(data.get("temperature"), "temperature", 0.0, 2.0),
        top_p=_number(data.get("top_p"), "top_p", 0.0, 1.0, open_low=True),
        top_k=_int(data.get("top_k"), "top_k", 0, 1 << 20), seed=_int(data.get("seed"), "seed", 0, MAX_SEED),
        stop=_stops(data.get("stop")), stream=_bool(data.get("stream"), "stream"),
        include_usage=bool((stream_options or {}).get("include_usage", False)),
        extension=parse_extension(data.get(NAME)))


def _text(value, param: str) -> str:
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)
    if not value.strip():
        raise bad(param, "is empty")
    if why := not_utf8(value):
        raise bad(param, why)
    return value


def _prompts(value) -> tuple[str, ...]:
    """A prompt or a list of them (token-id prompts are refused: the engine takes text)."""
    if isinstance(value, list) and value and len(value) <= 64:
        return tuple(_text(p, f"prompt[{i}]") for i, p in enumerate(value))
    if isinstance(value, str):
        return (_text(value, "prompt"),)
    raise wrong_type("prompt", "a string or a list of 1..64 strings", value)


def _chat(value) -> tuple[tuple[str, ...], tuple[dict, ...]]:
    if not (isinstance(value, list) and value and len(value) <= 256):
        raise wrong_type("messages", "a list of 1..256 messages", value)
    out = []
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and set(m) <= {"role", "content", "name"}):
            raise wrong_type(f"messages[{i}]", 'an object {"role", "content"}', m)
        if m.get("role") not in ROLES:
            raise bad(f"messages[{i}].role", f"one of {', '.join(ROLES)}, got {m.get('role')!r:.40}")
        out.append({"role": m["role"], "content": _text(m.get("content"), f"messages[{i}].content")})
    if out[-1]["role"] != "user":
        raise bad("messages", "the last message must be the user's (the reply continues the conversation)")
    return (), tuple(out)


def _int(value, param: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if not is_int(value):
        raise wrong_type(param, "an integer", value)
    if not low <= value <= high:
        raise bad(param, f"must be in {low}..{high:,}, got {value}", "out_of_range")
    return value


def _number(value, param: str, low: float, high: float, *, open_low: bool = False) -> float | None:
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(value):
        raise wrong_type(param, "a number", value)
    if not (low < value <= high if open_low else low <= value <= high):
        raise bad(param, f"must be in {'(' if open_low else '['}{low:g}, {high:g}], got {value}", "out_of_range")
    return float(value)


def _bool(value, param: str) -> bool:
    if value is not None and not isinstance(value, bool):
        raise wrong_type(param, "true or false", value)
    return bool(value)


def _stops(value) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not (isinstance(stops, list) and len(stops) <= MAX_STOPS and all(isinstance(s, str) and s for s in stops)):
        raise wrong_type("stop", f"a non-empty string or a list of up to {MAX_STOPS} of them", value)
    for s in stops:
        if why := not_utf8(s):
            raise bad("stop", why)
    return tuple(stops)
