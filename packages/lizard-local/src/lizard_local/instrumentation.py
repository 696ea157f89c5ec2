"""Request counters, injected latency and injected faults (for tests and benchmarks).

- Counters: every request under ``/api`` increments ``total`` and its route key
  (``"POST /api/sandboxes/{id}/exec"``; unknown paths count as ``"<METHOD> <unmatched>"``);
  ``connections`` counts TCP connections that carried at least one ``/api`` request. Control
  requests under ``/_local`` are never counted.
- Latency: every ``/api`` request waits ``latency_s`` before its handler runs, and the first
  ``/api`` request of each new connection waits ``connection_latency_s`` more (a slow connection
  set-up). Waiting before the handler, not after it, makes the delay add to the work for every
  response: a streamed exec's command only starts once the delay is over, as on a real link,
  instead of running during it. Errors (401, 404, injected faults) wait too.
- Server time: every ``/api`` request records the seconds the server spent on it, from the end
  of its injected latency to the end of its response (a streamed exec's whole run included), per
  route: ``seconds`` in the snapshot is the sum over all requests, ``server_time`` has each
  route's ``count``, ``total_s`` and ``max_s``. Reset with the counters.
- Faults: the next ``count`` requests of a route answer ``status`` (5xx, or 429 with
  ``retryAfterS``) without reaching the handler; the next ``count`` SSE exec streams are dropped
  (connection closed with no exit event) after ``after_events`` events.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lizard_local.http import ApiError

__all__ = ["Fault", "Instrumentation", "ServerTime", "StreamDrop"]


@dataclass
class Fault:
    """An injected error for the next ``remaining`` requests of a route."""

    status: int
    remaining: int
    retry_after_s: float | None = None

    def error(self) -> ApiError:
        """The error to answer with."""
        headers: dict[str, str] = {}
        extra: dict[str, Any] = {}
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(max(int(self.retry_after_s + 0.999), 0))
            extra["retryAfterS"] = self.retry_after_s
        if self.status == 429:
            extra.setdefault("limit", 1)
            extra.setdefault("running", 1)
            return ApiError(
                429, "Rate limit exceeded (injected)", "RATE_LIMITED", headers=headers, **extra
            )
        return ApiError(
            self.status,
            f"Injected fault ({self.status})",
            "INJECTED_FAULT",
            headers=headers,
            **extra,
        )


@dataclass
class StreamDrop:
    """Drop the next ``remaining`` SSE streams after ``after_events`` events."""

    remaining: int
    after_events: int


@dataclass
class ServerTime:
    """Running statistics of the server-side time of one route's requests."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def add(self, seconds: float) -> None:
        """Record one request that took ``seconds``."""
        self.count += 1
        self.total_s += seconds
        self.max_s = max(self.max_s, seconds)

    def as_dict(self) -> dict[str, float]:
        """JSON-ready: ``count``, ``total_s``, ``max_s``."""
        return {"count": self.count, "total_s": self.total_s, "max_s": self.max_s}


@dataclass
class Instrumentation:
    """Mutable instrumentation state of one server."""

    total: int = 0
    connections: int = 0
    routes: Counter[str] = field(default_factory=Counter)
    server_time: dict[str, ServerTime] = field(default_factory=dict)
    latency_s: float = 0.0
    connection_latency_s: float = 0.0
    faults: dict[str, Fault] = field(default_factory=dict)
    stream_drop: StreamDrop | None = None

    def count(self, route: str) -> None:
        """Count one request."""
        self.total += 1
        self.routes[route] += 1

    def arrive(self, route: str, *, new_connection: bool) -> float:
        """Count one ``/api`` request; the seconds it must wait before its handler runs.

        ``new_connection`` is True for the first ``/api`` request of a connection: it counts the
        connection and pays ``connection_latency_s`` on top of ``latency_s``. The latency is read
        here, once per request, so a request pays what was set when it arrived.
        """
        self.count(route)
        delay = self.latency_s
        if new_connection:
            self.connections += 1
            delay += self.connection_latency_s
        return delay

    def served(self, route: str, seconds: float) -> None:
        """Record the server-side time of one ``/api`` request (latency excluded)."""
        self.server_time.setdefault(route, ServerTime()).add(seconds)

    def snapshot(self) -> dict[str, Any]:
        """Counters and server-side times as JSON-ready data."""
        return {
            "total": self.total,
            "connections": self.connections,
            "routes": dict(self.routes),
            "seconds": sum(t.total_s for t in self.server_time.values()),
            "server_time": {route: t.as_dict() for route, t in self.server_time.items()},
        }

    def reset(self) -> None:
        """Zero every counter and server-side time."""
        self.total = 0
        self.connections = 0
        self.routes.clear()
        self.server_time.clear()

    def take_fault(self, route: str) -> ApiError | None:
        """The injected error for this request, if one is pending for its route."""
        fault = self.faults.get(route)
        if fault is None:
            return None
        fault.remaining -= 1
        if fault.remaining <= 0:
            del self.faults[route]
        return fault.error()

    def take_stream_drop(self) -> int | None:
        """Events to send before dropping this stream, if a drop is pending."""
        drop = self.stream_drop
        if drop is None:
            return None
        drop.remaining -= 1
        if drop.remaining <= 0:
            self.stream_drop = None
        return drop.after_events
