"""Reading a non-blocking pipe from an event loop's reader callback."""

from __future__ import annotations

import os

__all__ = ["read_ready"]


def read_ready(fd: int, size: int) -> bytes | None:
    """What ``fd`` has to give now: None when nothing is there yet, ``b""`` at end of file.

    A read error counts as end of file: the writer is gone either way, and the caller's reader
    must be removed rather than called again.
    """
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""
