"""Minimal ASGI request and response types (no framework: fewer layers on the hot path).

Every error leaves as JSON ``{"error": "<sentence>", "code"?: "<CODE>", ...}``, the shape the
lizard-sdk's ``handle_api_error`` parses into its exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

__all__ = [
    "ApiError",
    "Receive",
    "Request",
    "Response",
    "Scope",
    "Send",
    "StreamResponse",
    "json_response",
    "string_map",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ApiError(Exception):
    """An HTTP error answered with a JSON body."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        out: dict[str, Any] = {"error": self.message}
        if self.code:
            out["code"] = self.code
        out.update(self.extra)
        return out


def string_map(value: Any, name: str) -> dict[str, str]:
    """A body field that must be an object of strings (``envs``, ``metadata``); absent is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ApiError(400, f"{name} must be an object of strings", "INVALID_BODY")
    return dict(value)


@dataclass
class Request:
    """A fully received request."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)
    #: The ASGI receive callable, to notice a client that disconnects mid-request.
    receive: Receive | None = None

    @staticmethod
    def parse_query(raw: bytes) -> dict[str, str]:
        """Decode a query string (last value wins)."""
        return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))

    def json(self, *, required: bool = True) -> dict[str, Any]:
        """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
        if not self.body.strip():
            if required:
                raise ApiError(400, "A JSON request body is required", "INVALID_BODY")
            return {}
        try:
            data = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"Malformed JSON body: {exc}", "INVALID_JSON") from exc
        if not isinstance(data, dict):
            raise ApiError(400, "The JSON body must be an object", "INVALID_BODY")
        return data


@dataclass
class Response:
    """A complete response."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """Headers as ASGI wants them."""
        out = [
            (b"content-type", self.content_type.encode()),
            (b"content-length", str(len(self.body)).encode()),
        ]
        out.extend((k.lower().encode(), v.encode()) for k, v in self.headers.items())
        return out


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response."""
    return Response(status, json.dumps(data).encode(), headers=headers or {})


@dataclass
class StreamResponse:
    """A response whose body is produced by ``run(send_chunk)`` after the headers are sent."""

    status: int
    content_type: str
    run: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]
    headers: dict[str, str] = field(default_factory=dict)
