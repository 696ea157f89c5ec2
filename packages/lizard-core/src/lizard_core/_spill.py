"""Spill files, the output past a call's streamed budget, fetched without trusting them.

The kernel daemon writes the frames that do not fit in the exec stream to ``<job>/frames`` in the
sandbox, and the ``end`` frame names that file (:func:`read_spill`); the command agent spills a
command's raw output the same way (:func:`fetch_bounded`). Code in the sandbox can name
another file, or make that one a sparse file of any size, a FIFO or a link to a device, so
neither believes anything about it before reading. Contract:

- One ``GET files``, abandoned before its body is read when the response does not start within
  :data:`HEADERS_TIMEOUT_S`, has no ``Content-Length``, or announces more than ``max_bytes`` (the
  most the call's output limit and result budget allow as frames); a body that runs on past
  ``max_bytes`` is abandoned too. No buffer is ever sized from a header.
- The body is read as it arrives, one line (one frame) at a time, each at most
  :data:`MAX_LINE` bytes, and each frame goes to ``on_frame`` at once: the host never holds the
  file, only what ``on_frame`` keeps, which the kernel bounds by the call's limits.
- Every refusal, a missing file, one the platform will not serve (a 400) and a line that is not
  a JSON frame raise :class:`~lizard_core.errors.GuestProtocolError`; a sandbox that is gone raises
  :class:`~lizard_core.errors.SandboxGoneError`.
- :func:`open_spill` is the bounded body under both, as it arrives, for a caller that streams
  it elsewhere (a large read of :mod:`lizard_core.resolved_files`, spooled to a file).
- :func:`fetch_file` is the plain read under both: the bytes of a file, or None when there is
  none (a missing sandbox is told apart by its code or one ``GET`` of the sandbox record).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, Final

import lizard

from lizard_core._lines import bounded_lines
from lizard_core._transport import Transport
from lizard_core._wire import GuestFrame
from lizard_core.errors import (
    GuestProtocolError,
    LizardIntegrationError,
    ReadAbandonedError,
    SandboxGoneError,
    translate,
    translated,
)
from lizard_core.session import Session

__all__ = [
    "HEADERS_TIMEOUT_S",
    "MAX_LINE",
    "fetch_bounded",
    "fetch_file",
    "open_spill",
    "read_spill",
]

HEADERS_TIMEOUT_S: Final = 10.0
"""A spill is a regular file the daemon just wrote; a FIFO put in its place would block for good."""
MAX_LINE: Final = 256 * 1024
"""Longest frame line believed in a spill (the daemon writes lines under 64 KiB)."""


def fetch_bounded(session: Session, sandbox: Any, path: str, *, max_bytes: int) -> bytes:
    """The bytes of the spill file ``path``, at most ``max_bytes`` of them (one request).

    For a spill of raw output (a command's): refused as :func:`read_spill` refuses, and held in
    a buffer that grows as the body arrives, never one sized from its header.
    """
    pieces: list[bytes] = []
    with open_spill(session, sandbox, path, max_bytes) as chunks:
        pieces.extend(chunks)
    return b"".join(pieces)


def read_spill(
    session: Session,
    sandbox: Any,
    path: str,
    *,
    max_bytes: int,
    on_frame: Callable[[dict[str, Any]], None],
) -> None:
    """Feed the frames of the spill file ``path`` to ``on_frame``, in order (one request)."""
    with open_spill(session, sandbox, path, max_bytes) as chunks:
        for line in bounded_lines(chunks, MAX_LINE, what="The kernel's spilled output"):
            if line:
                on_frame(_frame(line))


@contextlib.contextmanager
def open_spill(
    session: Session, sandbox: Any, path: str, max_bytes: int
) -> Iterator[Iterator[bytes]]:
    """The body of ``GET files`` of ``path`` as it arrives, bounded; every refusal mapped."""
    sandbox_id = str(sandbox.sandbox_id)
    transport = session.transport()
    try:
        res = session.call(
            transport.open_bounded,
            sandbox_id,
            path,
            max_bytes=max_bytes,
            headers_timeout=HEADERS_TIMEOUT_S,
            idempotent=True,
            passthrough=(lizard.NotFoundError,),
        )
    except lizard.NotFoundError as exc:
        if getattr(exc, "code", None) == "SANDBOX_NOT_FOUND":
            raise translate(exc, sandbox_id=sandbox_id) from None
        raise GuestProtocolError(
            f"The spilled output {path} vanished before it was fetched."
        ) from None
    except ReadAbandonedError as exc:
        raise GuestProtocolError(f"The spilled output was refused: {exc}") from None
    except LizardIntegrationError as exc:
        if type(exc) is not LizardIntegrationError:
            raise  # gone, transient, credentials, quota: the sandbox's state, not the file's
        # The platform would not serve the file (not a regular file, say): the guest named it.
        raise GuestProtocolError(f"The spilled output could not be read: {exc}") from exc
    with contextlib.closing(res), translated(sandbox_id=sandbox_id):
        try:
            yield Transport.iter_bounded(res, max_bytes)
        except ReadAbandonedError as exc:
            raise GuestProtocolError(f"The spilled output was refused: {exc}") from None


def _frame(line: bytes) -> dict[str, Any]:
    try:
        frame = json.loads(line)
    except ValueError:
        frame = None
    if not isinstance(frame, dict) or not isinstance(frame.get(GuestFrame.TYPE), str):
        raise GuestProtocolError("The kernel's spilled output is malformed.")
    return frame


def fetch_file(
    session: Session, sandbox: Any, path: str, *, headers_timeout: float | None = None
) -> bytes | None:
    """The raw bytes of ``path`` through the files endpoint, or None if there is no such file.

    One ``GET files`` request over the session's pooled connection, retried on transient
    errors. A 404 that says the sandbox itself is gone (its code, or for a 404 without a code
    one ``GET`` of the sandbox record) raises :class:`~lizard_core.errors.SandboxGoneError`,
    not None. ``headers_timeout`` bounds the
    wait for the response's headers (see :meth:`Transport.read_bytes
    <lizard_core._transport.Transport.read_bytes>`): past it the request is abandoned and
    :class:`~lizard_core._transport.ReadAbandonedError` raised, without a retry.
    """
    sandbox_id = str(sandbox.sandbox_id)
    try:
        data: bytes = session.call(
            session.transport().read_bytes,
            sandbox_id,
            path,
            headers_timeout=headers_timeout,
            idempotent=True,
            passthrough=(lizard.NotFoundError,),
        )
    except lizard.NotFoundError as exc:
        code = getattr(exc, "code", None)
        if code == "SANDBOX_NOT_FOUND":
            raise translate(exc, sandbox_id=sandbox_id) from None
        if code is None:
            # Without a code the text cannot tell (it may name /workspace/sandbox_notes.txt):
            # one GET of the sandbox record does. If that fails too, say "no such file".
            try:
                session.check_alive()
            except SandboxGoneError:
                raise
            except LizardIntegrationError:
                pass
        return None
    return data
