"""Tunable behaviour of a running server (changeable at run time through ``/_local/configure``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["Settings"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "json_output": ("lines", "verbatim"),
    "special_file_reads": ("reject", "block", "stream"),
}


@dataclass
class Settings:
    """Limits and policies. Defaults follow the platform's documented limits."""

    #: Per-stream output cap in bytes (stdout and stderr separately); ``None`` = unlimited.
    stream_cap_bytes: int | None = 512 * 1024
    #: Whether the cap also applies to SSE streams (it always applies to JSON responses).
    cap_sse: bool = True
    #: Lines longer than this are split into pieces (SSE mode).
    line_split_bytes: int = 64 * 1024
    #: Seconds of silence before an SSE keep-alive comment is sent.
    keepalive_s: float = 15.0
    #: How long to keep reading output after the main process exits (background children may
    #: hold the pipes open).
    exit_grace_s: float = 0.1
    #: Per-command timeout when the request has none.
    default_exec_timeout_ms: int = 60_000
    #: Per-command timeouts above this are clamped to it.
    max_exec_timeout_ms: int = 3_600_000
    #: Largest request body accepted (413 above).
    max_body_bytes: int = 100 * 1024 * 1024
    #: JSON-mode ``stdout``/``stderr``: ``"lines"`` = the streamed lines joined by ``\n`` (no
    #: trailing newline, like the SDK's streaming result); ``"verbatim"`` = the bytes as written.
    json_output: str = "lines"
    #: ``GET files`` of a FIFO, socket or device: ``"reject"`` = answer 400 ``NOT_A_FILE`` at
    #: once; ``"block"`` = hang like a server that calls ``open()`` on it, until the client
    #: disconnects (or :data:`lizard_local.app.SPECIAL_FILE_BLOCK_S` pass), then answer that 400;
    #: ``"stream"`` = answer 200 and stream zeros without a length, like a server copying
    #: ``/dev/zero``, for as long.
    special_file_reads: str = "reject"

    def update(self, changes: dict[str, Any]) -> None:
        """Apply ``changes`` (snake_case names); ValueError on an unknown name or bad value."""
        known = {f.name: f for f in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown setting {name!r}")
            if name in _CHOICES:
                if value not in _CHOICES[name]:
                    allowed = ", ".join(repr(choice) for choice in _CHOICES[name])
                    raise ValueError(f"{name} must be one of {allowed}")
            elif name == "cap_sse":
                if not isinstance(value, bool):
                    raise ValueError("cap_sse must be a boolean")
            elif name == "stream_cap_bytes":
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0
                ):
                    raise ValueError("stream_cap_bytes must be a non-negative integer or null")
            elif isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a positive number")
            if name in ("line_split_bytes", "max_body_bytes") or name.endswith("_ms"):
                value = int(value)
            setattr(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready data."""
        return asdict(self)
