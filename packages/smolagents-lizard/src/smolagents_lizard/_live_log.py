"""Show a long step's output on the smolagents logger while it runs.

Contract: ``CodeAgent`` prints a step's logs once the step ends. Printing every chunk as it arrives
as well would show each short step's output twice, so a ``LiveLog`` stays quiet for the first
``after`` seconds of a step; once a step runs longer, everything printed so far is shown, and then
each chunk as it arrives. Live printing stops after ``limit`` characters with a marker (the step's
logs, capped the same way, still reach the model). ``after=None`` turns live output off.
"""

from __future__ import annotations

import threading
from typing import Any

from rich.text import Text
from smolagents.monitoring import LogLevel


class LiveLog:
    """A context manager around one step: feed it chunks with ``write``."""

    def __init__(self, logger: Any, *, after: float | None, limit: int) -> None:
        self._logger = logger
        self._after = after
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._live = False
        self._shown = 0
        self._timer: threading.Timer | None = None

    def __enter__(self) -> LiveLog:
        if self._after is not None:
            self._timer = threading.Timer(self._after, self._go_live)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._live = False
            self._pending.clear()

    def write(self, text: str) -> None:
        """Record a chunk of output; print it if the step has gone live."""
        if not text:
            return
        with self._lock:
            if self._live:
                self._show(text)
            elif self._after is not None:
                self._pending.append(text)

    def _go_live(self) -> None:
        with self._lock:
            self._live = True
            self._logger.log(
                Text(f"(step still running after {self._after:g} s; its output follows)", "dim"),
                level=LogLevel.INFO,
            )
            pending, self._pending = "".join(self._pending), []
            self._show(pending)

    def _show(self, text: str) -> None:
        if not text or self._shown > self._limit:
            return
        room = self._limit - self._shown
        self._shown += len(text)
        if len(text) > room:
            text = (
                text[:room] + "\n[... live output stops here; the step's logs are capped too ...]\n"
            )
            self._shown = self._limit + 1
        # Text() keeps rich from reading "[...]" in program output as markup.
        self._logger.log(Text(text), level=LogLevel.INFO, end="")
