"""Reading a guest program's stdout: lines become frames, pieces of split lines are joined.

Contract:

- A frame is a line holding one JSON object whose ``t`` is a string; any other line is noise.
- A line the platform split (at 64 KiB) is joined again; at most :data:`LINE_MAX` characters
  are held while joining, and what cannot be joined is delivered as noise, never dropped
  silently.
- :func:`is_pid` is the one check of a pid or process group a frame names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, TypeGuard

from lizard_core._wire import GuestFrame

__all__ = ["LINE_MAX", "LineReader", "is_pid", "parse_frame"]

LINE_MAX: Final = 1024 * 1024
"""Characters held while the pieces of one split line are joined."""

Frame = dict[str, Any]


class LineReader:
    """Turn stdout lines into frames, joining pieces of a line the platform split."""

    def __init__(self, deliver: Callable[[str, Any], None]) -> None:
        self._deliver = deliver
        self._pending = ""

    def feed(self, line: str) -> None:
        if self._pending:
            joined = self._pending + line
            frame = parse_frame(joined)
            if frame is not None:
                self._pending = ""
                self._deliver("frame", frame)
                return
            frame = parse_frame(line)
            if frame is not None:
                self._deliver("noise", self._pending)
                self._pending = ""
                self._deliver("frame", frame)
                return
            if len(joined) > LINE_MAX:
                self._deliver("noise", joined)
                joined = ""
            self._pending = joined
            return
        frame = parse_frame(line)
        if frame is None:
            self._pending = line
        else:
            self._deliver("frame", frame)

    def close(self) -> None:
        if self._pending:
            self._deliver("noise", self._pending)
            self._pending = ""


def is_pid(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31


def parse_frame(line: str) -> Frame | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get(GuestFrame.TYPE), str):
        return value
    return None
