r"""Turn a command's output bytes into the lines the Lizard API streams.

Rules (the platform's exec output framing, as lizard-sdk reads it):

- split on ``\n``; the ``\n`` is not part of the line; one trailing ``\r`` is dropped, so
  ``\r\n`` ends a line too;
- empty lines are lines (``""``); a final unterminated fragment is a line; nothing is emitted after
  a trailing ``\n``;
- a line longer than ``split_bytes`` is cut into pieces of at most that many bytes, each its own
  line, cut on a UTF-8 character boundary so no character is broken in two;
- bytes are decoded as UTF-8 with replacement; nothing else is trimmed or altered;
- at most ``cap_bytes`` bytes of a stream are used (``None`` = no cap); the rest is read and
  dropped, and ``truncated`` says so.
"""

from __future__ import annotations

__all__ = ["LineSplitter"]


def _utf8_cut(data: bytes, limit: int) -> int:
    """The largest cut position ``<= limit`` that does not fall inside a UTF-8 sequence."""
    cut = limit
    # Step back over continuation bytes (10xxxxxx), at most 3, to a character start.
    while cut > limit - 3 and cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


class LineSplitter:
    """Incremental splitter for one output stream."""

    def __init__(self, split_bytes: int | None, cap_bytes: int | None) -> None:
        self.split_bytes = split_bytes
        self.cap_bytes = cap_bytes
        self.seen = 0
        self.truncated = False
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        """Take more bytes; return the lines they complete."""
        if self.cap_bytes is not None:
            room = self.cap_bytes - self.seen
            if len(data) > room:
                self.truncated = True
                data = data[: max(room, 0)]
        self.seen += len(data)
        if not data:
            return []
        buf = self._pending + data if self._pending else data
        out: list[str] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            end = nl - 1 if nl > start and buf[nl - 1] == 0x0D else nl
            self._emit(buf[start:end], out)
            start = nl + 1
        rest = buf[start:]
        # Keep an unterminated fragment, but never more than one piece's worth.
        if self.split_bytes is not None:
            # A piece ending in "\r" might be half of a "\r\n": hold it one byte longer.
            while len(rest) > self.split_bytes + (1 if rest[-1:] == b"\r" else 0):
                cut = _utf8_cut(rest, self.split_bytes)
                out.append(rest[:cut].decode("utf-8", "replace"))
                rest = rest[cut:]
        self._pending = rest
        return out

    def finish(self) -> list[str]:
        """End of stream: the unterminated last line, if any."""
        rest, self._pending = self._pending, b""
        if not rest:
            return []
        out: list[str] = []
        self._emit(rest, out)
        return out

    def _emit(self, line: bytes, out: list[str]) -> None:
        split = self.split_bytes
        while split is not None and len(line) > split:
            cut = _utf8_cut(line, split)
            out.append(line[:cut].decode("utf-8", "replace"))
            line = line[cut:]
        out.append(line.decode("utf-8", "replace"))
