"""When waiting for a guest's next event is over.

- No frame (heartbeats included) for ``stall_s`` seconds: the guest is stalled.
- Past ``deadline_s`` from the start (when given): the call is over.
- After the ``end`` frame, the stream gets :data:`FINISH_GRACE_S` to close; then the outcome is
  returned anyway.
"""

from __future__ import annotations

import time
from typing import Final, Literal

__all__ = ["FINISH_GRACE_S", "WaitLimits"]

FINISH_GRACE_S: Final = 2.0
"""After the ``end`` frame, wait this long for the stream to close before returning anyway."""


class WaitLimits:
    """The limits of one guest call's wait: a stall, the deadline, or the end's grace."""

    def __init__(self, stall_s: float, deadline_s: float | None) -> None:
        self.stall_s = stall_s
        self.last = time.monotonic()  # the last frame, or the start
        self.deadline = None if deadline_s is None else self.last + deadline_s
        self.finish_by: float | None = None  # set once the end frame arrived

    def remaining(self) -> float:
        """Seconds until the nearest limit (0 when one has passed)."""
        limits = [self.last + self.stall_s]
        if self.deadline is not None:
            limits.append(self.deadline)
        if self.finish_by is not None:
            limits.append(self.finish_by)
        return max(min(limits) - time.monotonic(), 0)

    def heard(self) -> None:
        """A frame arrived: the stall limit starts again."""
        self.last = time.monotonic()

    def ended(self) -> None:
        """The end frame arrived: the stream gets :data:`FINISH_GRACE_S` more to close."""
        if self.finish_by is None:
            self.finish_by = self.last + FINISH_GRACE_S

    def over(self) -> Literal["lingering", "stalled", "deadline"]:
        """Which limit ended the wait (``lingering``: the stream outlived the end's grace)."""
        now = time.monotonic()
        if self.finish_by is not None and now >= self.finish_by:
            return "lingering"
        if now >= self.last + self.stall_s:
            return "stalled"
        return "deadline"
