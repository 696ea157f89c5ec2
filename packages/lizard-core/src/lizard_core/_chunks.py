"""Bytes given in pieces of any sizes, re-cut into the fixed-size chunks an upload sends.

Shared by :mod:`lizard_core.files` and :mod:`lizard_core.resolved_files`: a streamed write
uploads one chunk per request, whatever sizes the caller's iterable yields.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["check_data", "rechunk"]


def check_data(data: object) -> bytes:
    """``data`` as ``bytes`` (a copy of a ``bytearray`` or ``memoryview``); else TypeError."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    return data if isinstance(data, bytes) else bytes(data)


def rechunk(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Re-cut byte strings of any sizes into ``size``-byte pieces (the last one shorter).

    Holds less than one chunk besides the caller's current piece. Each piece is checked with
    :func:`check_data` as it comes.
    """
    buffer = bytearray()
    for piece in pieces:
        view = memoryview(check_data(piece))
        start = 0
        if buffer:
            start = min(size - len(buffer), len(view))
            buffer += view[:start]
            if len(buffer) < size:
                continue
            yield bytes(buffer)
            buffer = bytearray()
        if start == 0 and len(view) == size and type(piece) is bytes:
            yield piece  # already a chunk: no copy (a streamed upload reads exactly these)
            continue
        while len(view) - start >= size:
            yield bytes(view[start : start + size])
            start += size
        buffer += view[start:]
    if buffer:
        yield bytes(buffer)
