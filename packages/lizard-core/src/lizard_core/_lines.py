r"""Lines from a byte stream whose sender is not trusted: each line is bounded before it is held.

``httpx``'s ``iter_lines`` (and ``bytes.split``) hold a line whole however long it grows, so a
sender that never writes a newline makes the reader allocate everything it sends. Contract of
:func:`bounded_lines`: lines end at ``\n`` (one ``\r`` before it is dropped), at most
``max_line`` bytes are ever held for one line, and a longer line raises :class:`LineTooLongError`
(a :class:`~lizard_core.errors.GuestProtocolError`) as soon as it passes the bound, before the
rest of it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from lizard_core.errors import LineTooLongError

__all__ = ["LineTooLongError", "bounded_lines"]


def bounded_lines(chunks: Iterable[bytes], max_line: int, *, what: str) -> Iterator[bytes]:
    """The lines of ``chunks`` (without their ends), each at most ``max_line`` bytes.

    ``what`` names the stream in the error, e.g. ``"the exec stream"``. A last line without an
    ending is yielded too.
    """
    pending = bytearray()
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending += chunk[start:end]
            _check(pending, max_line, what)
            if pending.endswith(b"\r"):
                del pending[-1:]
            yield bytes(pending)
            pending.clear()
            start = end + 1
        pending += chunk[start:]
        _check(pending, max_line, what)
    if pending:
        yield bytes(pending)


def _check(pending: bytearray, max_line: int, what: str) -> None:
    if len(pending) > max_line:
        raise LineTooLongError(
            f"{what} sent a line of more than {max_line:,} bytes; it was not read further."
        )
