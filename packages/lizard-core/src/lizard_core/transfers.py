"""Many files in one call, one outcome per file: partial success, input order kept.

Frameworks' file protocols (Deep Agents' ``upload_files`` / ``download_files``, for one) take a
batch of paths and want a result per path rather than one exception for the batch. These
functions give that on :class:`~lizard_core.files.SandboxFiles`.

Contract (proven against lizard-local in ``tests/test_transfers.py``):

- **One outcome per item, in input order.** :func:`write_each` and :func:`read_each` (and
  :func:`awrite_each`, :func:`aread_each`) return a :class:`Transfer` per item: its ``data`` (for
  a read) or its ``error``, the builtin ``OSError`` the file operation raised
  (``FileNotFoundError``, ``IsADirectoryError``, ``PermissionError``, ...). A failed item does
  not stop the others.
- **Bad paths fail alone.** A path that is not absolute or holds NUL is that item's
  ``OSError(EINVAL)``, without a request.
- **Failures of the sandbox are raised.** A gone sandbox, rejected credentials, an exhausted
  quota, a transient API failure (every :class:`~lizard_core.errors.LizardIntegrationError`)
  are not about one file: they are raised at once, and the items after it are not attempted.
- **Shapes are checked first.** A batch that is not a list of paths (or of ``(path, bytes)``
  pairs) is a :class:`TypeError` before any request.
- **Cost and semantics** are those of :meth:`SandboxFiles.write_bytes
  <lizard_core.files.SandboxFiles.write_bytes>` (parents created, atomic replace) and
  :meth:`SandboxFiles.read_bytes <lizard_core.files.SandboxFiles.read_bytes>`, item by item.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from lizard_core._bridge import run_blocking
from lizard_core.checks import check_absolute_path
from lizard_core.files import CHUNK_SIZE, SandboxFiles

__all__ = [
    "Transfer",
    "adownload_file",
    "aread_each",
    "aupload_file",
    "awrite_each",
    "download_file",
    "read_each",
    "upload_file",
    "write_each",
]


@dataclass(frozen=True)
class Transfer:
    """The outcome of one file of a batch."""

    path: str
    """The path as given."""
    data: bytes | None = None
    """The file's bytes, for a read that succeeded."""
    error: OSError | None = None
    """Why this file failed, as the builtin ``OSError``; None on success."""


def _check_paths(paths: object) -> list[str]:
    if not isinstance(paths, Sequence) or isinstance(paths, str | bytes):
        raise TypeError("paths must be a list of str")
    for path in paths:
        if not isinstance(path, str):
            raise TypeError(f"paths must be str, not {type(path).__name__}")
    return list(paths)


def _check_items(items: object) -> list[tuple[str, bytes]]:
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise TypeError("files must be a list of (path, bytes) pairs")
    checked: list[tuple[str, bytes]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError("files must be a list of (path, bytes) pairs")
        path, data = item
        if not isinstance(path, str):
            raise TypeError(f"paths must be str, not {type(path).__name__}")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"the content of {path!r} must be bytes, not {type(data).__name__}")
        checked.append((path, bytes(data)))
    return checked


def _bad_path(path: str) -> OSError | None:
    if posixpath.isabs(path) and "\0" not in path:
        return None
    return OSError(errno.EINVAL, "the path must be absolute and without NUL", path)


def write_each(files: SandboxFiles, items: Iterable[tuple[str, bytes]]) -> list[Transfer]:
    """Write each ``(path, bytes)``; one :class:`Transfer` per item, in order (blocking)."""
    done = []
    for path, data in _check_items(items):
        error = _bad_path(path)
        if error is None:
            try:
                files.write_bytes(path, data)
            except OSError as failure:
                error = failure
        done.append(Transfer(path, error=error))
    return done


async def awrite_each(files: SandboxFiles, items: Iterable[tuple[str, bytes]]) -> list[Transfer]:
    """Async :func:`write_each`."""
    done = []
    for path, data in _check_items(items):
        error = _bad_path(path)
        if error is None:
            try:
                await files.awrite_bytes(path, data)
            except OSError as failure:
                error = failure
        done.append(Transfer(path, error=error))
    return done


def read_each(files: SandboxFiles, paths: Iterable[str]) -> list[Transfer]:
    """Read each path's bytes; one :class:`Transfer` per path, in order (blocking)."""
    done = []
    for path in _check_paths(paths):
        error = _bad_path(path)
        if error is None:
            try:
                done.append(Transfer(path, data=files.read_bytes(path)))
                continue
            except OSError as failure:
                error = failure
        done.append(Transfer(path, error=error))
    return done


async def aread_each(files: SandboxFiles, paths: Iterable[str]) -> list[Transfer]:
    """Async :func:`read_each`."""
    done = []
    for path in _check_paths(paths):
        error = _bad_path(path)
        if error is None:
            try:
                done.append(Transfer(path, data=await files.aread_bytes(path)))
                continue
            except OSError as failure:
                error = failure
        done.append(Transfer(path, error=error))
    return done


def _local_path(path: object) -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"the local path must be a str or os.PathLike, not {type(path).__name__}")
    local = os.fsdecode(os.fspath(path))
    if not local or "\0" in local:
        raise ValueError("the local path must be non-empty and without NUL")
    return local


def _read_pieces(handle: BinaryIO) -> Iterator[bytes]:
    while piece := handle.read(CHUNK_SIZE):
        yield piece


def _check_regular(path: str) -> None:
    """Refuse what is not a regular file before opening it (a FIFO would block the open)."""
    mode = os.stat(path).st_mode  # FileNotFoundError, PermissionError, ...
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file", path)


def _new_file_mode(path: str) -> int:
    """The mode the download gets: the replaced file's, else ``0o666`` under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    try:  # read, not set: os.umask() would change it for every thread meanwhile
        with open("/proc/self/status", encoding="ascii") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = 0o022
    return 0o666 & ~umask


def upload_file(files: SandboxFiles, local: str | os.PathLike[str], remote: str) -> int:
    """Copy the local regular file ``local`` to ``remote`` in the sandbox, streamed (blocking).

    Parents are created and an existing file is replaced atomically. Returns the bytes sent.
    A missing or unreadable local file is its builtin ``OSError``, before any request.
    """
    path = _local_path(local)
    check_absolute_path(remote)
    _check_regular(path)
    with open(path, "rb") as handle:
        sent = 0

        def counted() -> Iterator[bytes]:
            nonlocal sent
            for piece in _read_pieces(handle):
                sent += len(piece)
                yield piece

        files.write_chunks(remote, counted())
    return sent


def download_file(
    files: SandboxFiles,
    remote: str,
    local: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
) -> int:
    """Copy ``remote`` from the sandbox to the local file ``local``, streamed (blocking).

    The target is replaced only once the whole file arrived (a temporary file in its directory,
    then a rename); on any failure it is left as it was. Returns the bytes written. A file
    larger than ``max_bytes`` is a :class:`ValueError` (nothing is left behind).
    """
    path = _local_path(local)
    check_absolute_path(remote)
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0
    ):
        raise ValueError(f"max_bytes must be a non-negative int or None, not {max_bytes!r}")
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "the local target is a directory", path)
    mode = _new_file_mode(path)
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".lizard-download-")
    try:
        written = 0
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            for piece in files.iter_bytes(remote):
                written += len(piece)
                if max_bytes is not None and written > max_bytes:
                    raise ValueError(
                        f"{remote} in the sandbox is larger than max_bytes ({max_bytes} bytes)"
                    )
                handle.write(piece)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return written


async def aupload_file(files: SandboxFiles, local: str | os.PathLike[str], remote: str) -> int:
    """Async :func:`upload_file`; a cancellation waits for the transfer already under way."""
    return await run_blocking(upload_file, files, local, remote)


async def adownload_file(
    files: SandboxFiles,
    remote: str,
    local: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
) -> int:
    """Async :func:`download_file`; a cancellation waits for the transfer already under way."""
    return await run_blocking(download_file, files, remote, local, max_bytes=max_bytes)
