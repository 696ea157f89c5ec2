"""Files in the sandbox with builtin ``OSError`` semantics, one request per operation.

What holds (tested against lizard-local in ``tests/test_files.py``):

- **Paths** are absolute POSIX paths without NUL (else ValueError; a non-str is a TypeError),
  checked before any request; operations run as the sandbox's default user. Every path
  :meth:`SandboxFiles.list_dir` returns works everywhere, non-UTF-8 names included (surrogate
  escapes, as ``os.fsdecode`` gives them).
- **Errors** are the builtin ``OSError`` subclass for the sandbox's errno. FIFOs, sockets and
  devices fail with ``OSError(EINVAL)`` instead of blocking. A sandbox that is gone, also one
  destroyed mid-operation, raises :class:`~lizard_core.errors.SandboxGoneError`.
- **Operations.** :meth:`SandboxFiles.write_bytes` writes through symlinks, creates parents and
  replaces a regular file atomically, keeping its mode and owner. :meth:`SandboxFiles.stat` and
  :meth:`SandboxFiles.list_dir` follow symlinks for ``is_dir`` and ``size``.
  :meth:`SandboxFiles.make_dir` is ``mkdir -p``. :meth:`SandboxFiles.remove` (with
  ``recursive=False``, no directory) refuses ``/``, the protected directories and their
  ancestors (after resolving symlinks) with ValueError.
  :meth:`SandboxFiles.realpath` is ``os.path.realpath`` in the sandbox.
- **Cost.** One request per operation in the common case: one exec for the metadata operations
  and for writes up to :data:`WRITE_INLINE`; one ``GET files`` for
  :meth:`SandboxFiles.read_bytes`. A path the files endpoint will not serve is read through the
  guest (an error then costs two requests). Larger transfers cost one request per
  :data:`CHUNK_SIZE` chunk (plus one). All go through the session's pooled connection.
- **Memory.** Besides the data itself, the host holds at most one chunk in flight;
  :meth:`SandboxFiles.read_bytes` fills one buffer sized from ``Content-Length``;
  :meth:`SandboxFiles.iter_bytes` and :meth:`SandboxFiles.write_chunks` never hold a whole file.
- **Async.** Every operation has an ``a``-prefixed coroutine. A cancelled task waits for the
  operation already sent, then propagates.
"""

from __future__ import annotations

import base64
import errno
import itertools
import json
import os
import posixpath
import uuid
import zlib
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from lizard_core._bridge import run_blocking
from lizard_core._chunks import check_data, rechunk
from lizard_core._spill import fetch_bounded
from lizard_core._transport import ReadAbandonedError
from lizard_core._wire import AgentEnd, AgentFrame, GuestFrame
from lizard_core.checks import check_absolute_path
from lizard_core.errors import GuestProtocolError, LizardIntegrationError, SandboxGoneError
from lizard_core.guest import (
    JOBS_ROOT,
    Frame,
    GuestNotStartedError,
    check_outcome,
    encode_args,
    fetch_file,
    is_job_file,
    run_guest,
    schedule_cleanup,
)
from lizard_core.session import Session

__all__ = [
    "CHUNK_SIZE",
    "LIST_BUDGET",
    "READ_COMPRESSED",
    "READ_GUARD_S",
    "READ_INLINE",
    "WRITE_INLINE",
    "FileStat",
    "SandboxFiles",
]

T = TypeVar("T")

READ_GUARD_S: Final = 2.0
"""Seconds :meth:`SandboxFiles.read_bytes` waits for the response headers of its ``GET files``;
past that it abandons the request (as for a FIFO the platform blocks on) and lets the guest read
the path. A body that has started is read under the usual 60 s limit."""
READ_INLINE: Final = 256 * 1024
"""When the guest reads a file (:meth:`SandboxFiles.iter_bytes`, and :meth:`SandboxFiles.read_bytes`
when its ``GET`` failed), files up to this size come back inside the exec stream."""
READ_COMPRESSED: Final = 1024 * 1024
"""In those guest reads, files up to this size also come back inside the exec stream when their
zlib form fits READ_INLINE (text usually does); others are fetched with ``GET files``."""
WRITE_INLINE: Final = 1024 * 1024
"""Writes up to this size travel in the exec's argv (about 1.4 MB of base64 in items of 96 KiB,
under the kernel's 128 KiB per-argument and 2 MiB total limits): one request."""
CHUNK_SIZE: Final = 4 * 1024 * 1024
"""Writes and ``iter_bytes`` move larger files in pieces of this size: one request (or two,
for ``iter_bytes``) per piece."""
_WHOLE: Final = 2**63 - 1
"""A chunk size no file reaches: read the file in one piece."""
LIST_BUDGET: Final = 256 * 1024
"""Bytes of directory entries sent inside the exec stream; the rest is spilled and fetched."""
LIST_SPILL_MAX: Final = 256 * 1024 * 1024
"""Most bytes of spilled directory entries fetched (over a million entries)."""
_FILE_EXEC_S: Final = 600.0


@dataclass(frozen=True)
class FileStat:
    """What :meth:`SandboxFiles.stat` and :meth:`SandboxFiles.list_dir` report for one entry."""

    name: str
    """The entry's base name."""
    path: str
    """The entry's absolute path, as asked (for a listing: the directory joined with ``name``)."""
    kind: str
    """The entry itself, not following a symlink: ``file``, ``dir``, ``symlink``, ``fifo``,
    ``socket``, ``char``, ``block`` or ``other``."""
    is_dir: bool
    """Whether it is a directory, following a symlink to its target."""
    size: int | None
    """Size in bytes of a regular file (following a symlink); None for anything else."""
    mode: int
    """Permission bits of the entry itself, e.g. ``0o644``."""
    mtime: float
    """Modification time of the entry itself, in seconds since the epoch."""
    symlink_target: str | None = None
    """The link's text, for a symlink."""

    @classmethod
    def _from_row(cls, path: str, row: Sequence[Any]) -> FileStat:
        name, kind, is_dir, size, mode, mtime_ns, link = row
        return cls(
            name=name,
            path=path,
            kind=kind,
            is_dir=bool(is_dir),
            size=size,
            mode=mode,
            mtime=mtime_ns / 1e9,
            symlink_target=link,
        )


def _check_path(path: object) -> str:
    return check_absolute_path(path)


def _http_safe(path: str) -> bool:
    """Whether the files endpoint can be asked for ``path`` (its query string is UTF-8).

    A name that is not UTF-8 (listed as surrogate escapes) can only be reached through the guest.
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_flag(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError("recursive must be a bool")
    return value


def _job_file(path: object) -> str:
    if not is_job_file(path):
        raise GuestProtocolError(f"The guest named an unexpected job file: {str(path)[:200]!r}")
    return path


def _data_frames(frames: list[bytes]) -> Callable[[Frame], None]:
    received = 0

    def on_frame(frame: Frame) -> None:
        # Another process in the sandbox can write to the agent's stdout: checked, and bounded
        # by what one inline read may send.
        nonlocal received
        if frame[GuestFrame.TYPE] != AgentFrame.FILE_DATA:
            return
        try:
            piece = base64.b64decode(frame.get(AgentFrame.DATA), validate=True)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise GuestProtocolError("The file agent sent a malformed data frame.") from None
        received += len(piece)
        if received > READ_INLINE:
            raise GuestProtocolError("The file agent sent more data than one read may.")
        frames.append(piece)

    return on_frame


class SandboxFiles:
    """File operations on a session's sandbox (sync methods, and ``a``-prefixed async ones).

    ``protected`` names directories that :meth:`remove` refuses to delete, with their
    ancestors (``/`` always is), typically the agent's working directory. Constructing it makes
    no request; the first operation creates or attaches the sandbox.
    """

    def __init__(self, session: Session, *, protected: Sequence[str] = ()) -> None:
        if not isinstance(session, Session):
            raise TypeError(f"session must be a lizard_core Session, not {type(session).__name__}")
        if isinstance(protected, str):
            raise TypeError("protected must be a sequence of paths, not one str")
        self._session = session
        self._protected = tuple(_check_path(path) for path in protected)

    @property
    def session(self) -> Session:
        """The session whose sandbox these files live in."""
        return self._session

    @property
    def protected(self) -> tuple[str, ...]:
        """Directories :meth:`remove` refuses, with their ancestors."""
        return self._protected

    # ── blocking bodies (given the sandbox) ──────────────────────────────

    def _op(self, sandbox: Any, request: dict[str, Any], **kwargs: Any) -> Frame:
        return check_outcome(
            run_guest(
                sandbox, request, exec_timeout_s=_FILE_EXEC_S, session=self._session, **kwargs
            )
        )

    def _get(
        self, sandbox: Any, path: str, *, ours: bool = False, max_bytes: int = CHUNK_SIZE
    ) -> bytes:
        """Raw bytes through the files endpoint: one request, retried on transient errors.

        ``ours`` marks a job file this module made: its absence is a protocol failure.
        """
        if ours:
            # A job file the guest named: never more than ``max_bytes``, whatever it claims.
            return fetch_bounded(self._session, sandbox, _job_file(path), max_bytes=max_bytes)
        data = fetch_file(self._session, sandbox, path)
        if data is None:
            if ours:
                raise GuestProtocolError(f"The job file {path} vanished before it was fetched.")
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return data

    def _stat(self, sandbox: Any, path: str) -> FileStat:
        final = self._op(sandbox, {"op": "stat", "path": path})
        return FileStat._from_row(path.rstrip("/") or "/", final[AgentEnd.ENTRY])

    def _list_dir(self, sandbox: Any, path: str) -> list[FileStat]:
        rows: list[Any] = []

        def on_frame(frame: Frame) -> None:
            if frame[GuestFrame.TYPE] == AgentFrame.ENTRIES:
                rows.extend(frame[AgentFrame.ENTRIES])

        final = self._op(
            sandbox, {"op": "list", "path": path, "budget": LIST_BUDGET}, on_frame=on_frame
        )
        spilled = final.get(AgentEnd.SPILL)
        if spilled:
            spilled = _job_file(spilled)
            try:
                text = self._get(sandbox, spilled, ours=True, max_bytes=LIST_SPILL_MAX).decode(
                    "ascii"
                )
            finally:
                schedule_cleanup(sandbox, posixpath.dirname(spilled))
            rows.extend(json.loads(line) for line in text.splitlines() if line)
        if len(rows) != final[AgentEnd.COUNT]:
            raise GuestProtocolError(
                f"The listing of {path} is incomplete: "
                f"{len(rows)} of {final[AgentEnd.COUNT]} entries."
            )
        base = path.rstrip("/") or "/"
        rows.sort(key=lambda row: row[0])
        return [FileStat._from_row(posixpath.join(base, row[0]), row) for row in rows]

    def _read_bytes(self, sandbox: Any, path: str) -> bytes:
        if not _http_safe(path):
            return next(self._iter_bytes(sandbox, path, whole=True))
        # One GET of the whole file; its body is returned as it is, never held twice.
        try:
            data = fetch_file(self._session, sandbox, path, headers_timeout=READ_GUARD_S)
        except ReadAbandonedError:
            data = None  # perhaps a FIFO or device the platform's GET blocks on or streams
        except SandboxGoneError:
            raise
        except LizardIntegrationError:
            data = None  # a directory, special file, permission, ...: the guest says which
        if data is not None:
            return data
        # The guest raises the path's builtin error, or reads the file after all: in one piece
        # (the exec stream, or its check then one GET), returned as it is.
        return next(self._iter_bytes(sandbox, path, whole=True))

    def _iter_bytes(
        self, sandbox: Any, path: str, *, whole: bool = False
    ) -> Generator[bytes, None, None]:
        frames: list[bytes] = []
        request = {
            "op": "read",
            "path": path,
            "inline": READ_INLINE,
            "zip": READ_COMPRESSED,
            # Larger than any file when ``whole``: the guest then copies nothing to a job file.
            "chunk": _WHOLE if whole else CHUNK_SIZE,
            "copy": not _http_safe(path),
        }
        final = self._op(sandbox, request, on_frame=_data_frames(frames))
        if AgentEnd.COUNT in final:
            data = b"".join(frames)
            if final.get(AgentEnd.ZLIB):
                inflater = zlib.decompressobj()
                data = inflater.decompress(data, READ_COMPRESSED + 1)  # a bomb stops here
                if inflater.unconsumed_tail or len(data) > READ_COMPRESSED:
                    raise GuestProtocolError(f"The compressed read of {path} is too large.")
            if len(data) != final[AgentEnd.COUNT]:
                raise GuestProtocolError(
                    f"Read {len(data)} of {final[AgentEnd.COUNT]} bytes of {path}."
                )
            yield data
            return
        part = final.get(AgentEnd.PART)
        if part is None:
            # Checked by the guest to be a regular file, so the files endpoint cannot block.
            yield self._get(sandbox, path)
            return
        job = posixpath.dirname(_job_file(part[0]))
        try:
            size, offset = final[AgentEnd.SIZE], 0
            while True:
                chunk = self._get(sandbox, part[0], ours=True)
                if len(chunk) != part[1] or not chunk:
                    raise GuestProtocolError(
                        f"Chunk of {path} at {offset}: got {len(chunk)} bytes."
                    )
                offset += len(chunk)
                yield chunk
                if offset >= size:
                    return
                chunk = b""  # not ours to keep while the next one is fetched
                request = {
                    "op": "chunk",
                    "path": path,
                    "off": offset,
                    "len": CHUNK_SIZE,
                    "id": final[AgentEnd.IDENTITY],
                    "job": job,
                }
                part = self._op(sandbox, request)[AgentEnd.PART]
        finally:
            schedule_cleanup(sandbox, job)

    def _write_chunks(self, sandbox: Any, path: str, chunks: Iterable[bytes]) -> None:
        pieces = rechunk(chunks, CHUNK_SIZE)
        first = next(pieces, b"")
        second = next(pieces, None)
        if second is None and len(first) <= WRITE_INLINE:
            try:
                final = self._op(
                    sandbox, {"op": "write", "path": path}, data_args=encode_args(first)
                )
            except LizardIntegrationError as exc:
                # Nothing ran: the argv or the body was too large for this platform. Upload in
                # chunks instead.
                if not isinstance(exc, GuestNotStartedError) and exc.status_code != 413:
                    raise
            else:
                self._check_written(path, final, len(first))
                return
        rest = itertools.chain([first], [] if second is None else [second], pieces)
        self._write_staged(sandbox, path, rest)

    def _write_staged(self, sandbox: Any, path: str, chunks: Iterator[bytes]) -> None:
        job = f"{JOBS_ROOT}/{uuid.uuid4().hex[:16]}"
        staged: list[str] = []
        total = 0
        committed = False
        try:
            for index, chunk in enumerate(chunks):
                name = f"{job}/w{index:06d}"
                self._session.call(
                    self._session.transport().write_bytes,
                    str(sandbox.sandbox_id),
                    name,
                    chunk,
                    idempotent=True,
                )
                staged.append(name)
                total += len(chunk)
            final = self._op(sandbox, {"op": "write", "path": path, "staged": staged})
            committed = True
            self._check_written(path, final, total)
        finally:
            if staged and not committed:
                schedule_cleanup(sandbox, job)

    @staticmethod
    def _check_written(path: str, final: Frame, expected: int) -> None:
        if final.get(AgentEnd.COUNT) != expected:
            raise GuestProtocolError(
                f"Wrote {final.get(AgentEnd.COUNT)} of {expected} bytes to {path}."
            )

    def _remove(self, sandbox: Any, path: str, recursive: bool = True) -> None:
        request: dict[str, Any] = {"op": "remove", "path": path, "protect": list(self._protected)}
        if not recursive:
            request["tree"] = False
        final = self._op(sandbox, request)
        refused = final.get(AgentEnd.REFUSED)
        if refused is not None:
            raise ValueError(
                f"Refusing to remove {path}: it resolves to {refused}, which is / or holds "
                "a protected directory."
            )

    def _remove_checked(self, path: str) -> str:
        path = _check_path(path)
        if posixpath.normpath(path) in ("/", "//"):
            raise ValueError("Refusing to remove /.")
        return path

    # ── sync API ─────────────────────────────────────────────────────────

    def read_bytes(self, path: str) -> bytes:
        """The contents of the regular file ``path``."""
        path = _check_path(path)
        return self._read_bytes(self._session.sandbox(), path)

    def iter_bytes(self, path: str) -> Iterator[bytes]:
        """The contents of ``path`` in pieces of at most :data:`CHUNK_SIZE` bytes."""
        path = _check_path(path)
        return self._iter_bytes(self._session.sandbox(), path)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (through symlinks, parents created, atomic replace)."""
        path = _check_path(path)
        data = check_data(data)
        self._write_chunks(self._session.sandbox(), path, (data,))

    def write_chunks(self, path: str, chunks: Iterable[bytes]) -> None:
        """Like :meth:`write_bytes`, from an iterable of byte strings of any sizes."""
        path = _check_path(path)
        self._write_chunks(self._session.sandbox(), path, chunks)

    def stat(self, path: str) -> FileStat:
        """Describe ``path`` (FileNotFoundError if it does not exist)."""
        path = _check_path(path)
        return self._stat(self._session.sandbox(), path)

    def list_dir(self, path: str) -> list[FileStat]:
        """The entries of directory ``path``, sorted by name (NotADirectoryError for a file)."""
        path = _check_path(path)
        return self._list_dir(self._session.sandbox(), path)

    def make_dir(self, path: str) -> None:
        """Create directory ``path`` and missing parents; an existing directory is fine."""
        path = _check_path(path)
        self._op(self._session.sandbox(), {"op": "mkdir", "path": path})

    def remove(self, path: str, *, recursive: bool = True) -> None:
        """Remove a file, a symlink (not its target) or a directory tree.

        With ``recursive=False`` a directory is refused (IsADirectoryError), as ``os.remove`` does.
        """
        path = self._remove_checked(path)
        self._remove(self._session.sandbox(), path, _check_flag(recursive))

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists, following symlinks."""
        path = _check_path(path)
        return bool(
            self._op(self._session.sandbox(), {"op": "exists", "path": path})[AgentEnd.VALUE]
        )

    def realpath(self, path: str) -> str:
        """``path`` with symlinks resolved in the sandbox, like ``os.path.realpath``."""
        path = _check_path(path)
        return str(
            self._op(self._session.sandbox(), {"op": "realpath", "path": path})[AgentEnd.VALUE]
        )

    # ── async API ────────────────────────────────────────────────────────

    async def _arun(self, fn: Callable[..., T], *args: Any) -> T:
        sandbox = await self._session.asandbox()
        return await run_blocking(fn, sandbox, *args)

    async def aread_bytes(self, path: str) -> bytes:
        """Async :meth:`read_bytes`."""
        path = _check_path(path)
        return await self._arun(self._read_bytes, path)

    async def aiter_bytes(self, path: str) -> AsyncGenerator[bytes, None]:
        """Async :meth:`iter_bytes`: each piece is fetched in a worker thread."""
        path = _check_path(path)
        sandbox = await self._session.asandbox()
        pieces = self._iter_bytes(sandbox, path)
        try:
            while True:
                piece = await run_blocking(next, pieces, None)
                if piece is None:
                    return
                yield piece
        finally:
            pieces.close()  # schedules the job directory's cleanup; no I/O

    async def awrite_bytes(self, path: str, data: bytes) -> None:
        """Async :meth:`write_bytes`."""
        path = _check_path(path)
        data = check_data(data)
        await self._arun(self._write_chunks, path, (data,))

    async def awrite_chunks(self, path: str, chunks: Iterable[bytes]) -> None:
        """Async :meth:`write_chunks`.

        ``chunks`` is iterated in a worker thread, one piece at a time, so a blocking source (a
        file being read) never holds the event loop or the whole file.
        """
        path = _check_path(path)
        await self._arun(self._write_chunks, path, chunks)

    async def astat(self, path: str) -> FileStat:
        """Async :meth:`stat`."""
        return await self._arun(self._stat, _check_path(path))

    async def alist_dir(self, path: str) -> list[FileStat]:
        """Async :meth:`list_dir`."""
        return await self._arun(self._list_dir, _check_path(path))

    async def amake_dir(self, path: str) -> None:
        """Async :meth:`make_dir`."""
        path = _check_path(path)
        await self._arun(lambda sandbox, p: self._op(sandbox, {"op": "mkdir", "path": p}), path)

    async def aremove(self, path: str, *, recursive: bool = True) -> None:
        """Async :meth:`remove`."""
        await self._arun(self._remove, self._remove_checked(path), _check_flag(recursive))

    async def aexists(self, path: str) -> bool:
        """Async :meth:`exists`."""
        path = _check_path(path)
        final = await self._arun(
            lambda sandbox, p: self._op(sandbox, {"op": "exists", "path": p}), path
        )
        return bool(final[AgentEnd.VALUE])

    async def arealpath(self, path: str) -> str:
        """Async :meth:`realpath`."""
        path = _check_path(path)
        final = await self._arun(
            lambda sandbox, p: self._op(sandbox, {"op": "realpath", "path": p}), path
        )
        return str(final[AgentEnd.VALUE])
