"""An API error: the HTTP status and OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`.

Every refusal of bad input is one of these, raised where the input is read and answered by the app in one
place (routes.py), so a bad request gets a 4xx whose message names the field, never a 500.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.config_checks import shown

# OpenAI's error types by status: clients (the openai package among them) map the status to an exception class
TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
         500: "server_error", 503: "server_error"}


@dataclass(slots=True)
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"an API error's status is 4xx or 5xx, got {self.status}")

    @property
    def body(self) -> dict:
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def __str__(self) -> str:
        return f"{self.status} {self.message}"


def bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    """A 400 about one field: the message starts with its name, as OpenAI's do."""
    return ApiError(400, f"{param}: {message}", param, code)


def wrong_type(param: str, expected: str, value) -> ApiError:
    return bad(param, f"expected {expected}, got {shown(value)}", "invalid_type")
