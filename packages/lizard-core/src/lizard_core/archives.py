"""A sandbox directory as a tar moved through the host: pack it, check one, unpack it.

For frameworks that persist a workspace as bytes they store themselves (the OpenAI Agents SDK's
``persist_workspace`` / ``hydrate_workspace``). Contract (``tests/test_archives.py``, against
lizard-local):

- :func:`apack_directory` runs ``tar`` in the sandbox on the directory, members relative to it
  (``./...``), leaving out ``exclude`` (relative paths, no wildcards), and streams the archive
  to the host in :data:`~lizard_core.files.CHUNK_SIZE` pieces: the host holds at most a piece
  plus ``spool_memory`` bytes (a temporary file past that), and at most ``max_bytes`` in all
  (:data:`MAX_ARCHIVE_BYTES` by default; past it
  :class:`~lizard_core.errors.OutputLimitError`, nothing returned, since the sandbox decides
  the size). Two requests plus one per piece.
- :func:`check_archive` reads the headers one at a time, keeping none, and refuses, with
  :class:`~lizard_core.errors.UnsafeArchiveError` (a ``ValueError``): anything but an
  uncompressed tar, absolute names, ``..``, names over :data:`MAX_NAME` bytes, hard links,
  devices and FIFOs, a symlink named ``.``, any member under a symlink member, more than
  ``max_members`` members, and a member whose headers (pax records, GNU long names, sparse
  maps: read into memory) pass :data:`HEADER_BYTES`. The host's memory and time are linear in
  the members, never in the bytes a header claims. A symlink pointing out stays a link (a
  virtualenv has them); what follows it is for the reader to resolve.
- :func:`aunpack_archive` checks the archive on the host first, so nothing of a refused one is
  extracted, then uploads it in pieces and unpacks it under the directory (created if missing).
- ``tar`` failing in the sandbox is :class:`~lizard_core.errors.ArchiveCommandError`; the
  sandbox's temporary archive (in ``/tmp``) is removed on every path.
"""

from __future__ import annotations

import contextlib
import posixpath
import tarfile
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final

from lizard_core.checks import check_positive_int
from lizard_core.commands import arun_command
from lizard_core.errors import (
    ArchiveCommandError,
    LizardIntegrationError,
    OutputLimitError,
    UnsafeArchiveError,
)
from lizard_core.files import CHUNK_SIZE, SandboxFiles
from lizard_core.session import Session

__all__ = [
    "HEADER_BYTES",
    "MAX_ARCHIVE_BYTES",
    "MAX_MEMBERS",
    "MAX_NAME",
    "SPOOL_MEMORY",
    "apack_directory",
    "aunpack_archive",
    "check_archive",
    "iter_chunks",
]

SPOOL_MEMORY: Final = 8 * 1024 * 1024
"""Bytes of an archive held in memory before it spills to a temporary file."""
MAX_ARCHIVE_BYTES: Final = 8 * 1024**3
"""Most bytes of an archive :func:`apack_directory` takes to the host by default (8 GiB): the
sandbox makes the archive, so its size is bounded before the host's disk is."""
MAX_MEMBERS: Final = 500_000
"""Most members :func:`check_archive` accepts by default."""
HEADER_BYTES: Final = 1024 * 1024
"""Most bytes of headers one member may have: ``tarfile`` reads a pax or GNU long-name header
whole, so a sandbox could otherwise make the host allocate what it likes."""
_SYMLINK: Final[dict[str, Any]] = {}  # the mark of a symlink in check_archive's tree
MAX_NAME: Final = 4096
"""Longest member name accepted, in bytes (Linux's ``PATH_MAX``)."""


def iter_chunks(stream: IO[bytes] | IO[str]) -> Iterator[bytes]:
    """``stream`` read in :data:`~lizard_core.files.CHUNK_SIZE` pieces (text is UTF-8)."""
    while piece := stream.read(CHUNK_SIZE):
        yield piece.encode() if isinstance(piece, str) else bytes(piece)


def check_archive(fileobj: IO[bytes], *, max_members: int = MAX_MEMBERS) -> None:
    """Refuse an unsafe tar (see the module docstring); rewind ``fileobj`` when it passes."""
    start = fileobj.tell()
    links: dict[str, Any] = {}  # name -> its children's tree, or _SYMLINK
    budget = _HeaderBudget(fileobj)
    try:
        # "r:": uncompressed only (what apack_directory makes): a compressed one would be
        # checked after decompression, at a cost its size does not show.
        with tarfile.open(fileobj=budget, mode="r:") as tar:  # type: ignore[call-overload]
            count = 0
            member = tar.firstmember
            while member is not None:
                count += 1
                if count > max_members:
                    raise UnsafeArchiveError("<tar>", "too many members")
                _check_member(member, links)
                tar.members.clear()  # tarfile keeps every header read: keep none
                budget.reset()
                member = tar.next()
    except tarfile.TarError as error:
        raise UnsafeArchiveError("<tar>", f"not a readable tar: {error}") from error
    fileobj.seek(start)


class _HeaderBudget:
    """The archive for ``tarfile``, refusing to read more than :data:`HEADER_BYTES` per member.

    ``tarfile`` skips member data by seeking, so what it reads are headers.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._left = HEADER_BYTES

    def reset(self) -> None:
        self._left = HEADER_BYTES

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._left:
            raise UnsafeArchiveError("<tar>", f"a member's headers pass {HEADER_BYTES} bytes")
        data = self._raw.read(size)
        self._left -= len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()


def _check_member(member: tarfile.TarInfo, links: dict[str, Any]) -> None:
    name = member.name
    if len(name.encode("utf-8", errors="surrogateescape")) > MAX_NAME:
        raise UnsafeArchiveError(name[:200], f"name over {MAX_NAME} bytes")
    if name.startswith("/") or posixpath.isabs(name):
        raise UnsafeArchiveError(name, "absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(name, "parent directory reference")
    if member.islnk():
        raise UnsafeArchiveError(name, "hard link")
    if not (member.isreg() or member.isdir() or member.issym()):
        raise UnsafeArchiveError(name, "device, FIFO or other special file")
    # The symlinks as a tree of names: a member's ancestors are one walk, linear in its name.
    node = links
    for part in parts[:-1]:
        if (child := node.get(part)) is None:
            break
        if child is _SYMLINK:
            raise UnsafeArchiveError(name, "under a symlink")
        node = child
    if member.issym() and not parts:
        raise UnsafeArchiveError(name, "a symlink in place of the directory itself")
    if member.issym():
        node = links
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if child is _SYMLINK:
                raise UnsafeArchiveError(name, "under a symlink")
            node = child
        node[parts[-1]] = _SYMLINK


async def apack_directory(
    session: Session,
    directory: str,
    *,
    exclude: Iterable[str] = (),
    spool_memory: int = SPOOL_MEMORY,
    max_bytes: int = MAX_ARCHIVE_BYTES,
) -> tempfile.SpooledTemporaryFile[bytes]:
    """A tar of ``directory``, members relative to it, in a host file at position 0.

    Raises :class:`~lizard_core.errors.OutputLimitError` once the archive passes ``max_bytes``.
    """
    check_positive_int(max_bytes, name="max_bytes")
    archive = f"/tmp/lizard-archive-{uuid.uuid4().hex}.tar"
    excludes = [f"--exclude=./{rel.strip('/')}" for rel in sorted(exclude)]
    argv = ["tar", "cf", archive, "--no-wildcards", *excludes, "-C", directory, "."]
    files = SandboxFiles(session)
    spool = tempfile.SpooledTemporaryFile(max_size=spool_memory)  # noqa: SIM115  # returned
    try:
        await _checked(session, argv)
        size = 0
        async for piece in files.aiter_bytes(archive):
            size += len(piece)
            if size > max_bytes:
                raise OutputLimitError(
                    f"the archive of {directory!r} passed max_bytes ({max_bytes} bytes); "
                    "exclude what need not be saved, or raise the limit",
                    limit=max_bytes,
                )
            spool.write(piece)
    except BaseException:
        spool.close()
        raise
    finally:
        await _remove_quietly(files, archive)
    spool.seek(0)
    return spool


async def aunpack_archive(
    session: Session,
    directory: str,
    data: IO[bytes] | IO[str],
    *,
    max_members: int = MAX_MEMBERS,
    spool_memory: int = SPOOL_MEMORY,
    head: bytes = b"",
) -> None:
    """Check the tar in ``data`` on the host, then unpack it under ``directory``.

    ``head``: bytes of the archive already read from ``data`` (they come first).
    """
    with tempfile.SpooledTemporaryFile(max_size=spool_memory) as spool:
        spool.write(head)
        for piece in iter_chunks(data):
            spool.write(piece)
        spool.seek(0)
        check_archive(spool, max_members=max_members)
        archive = f"/tmp/lizard-archive-{uuid.uuid4().hex}.tar"
        files = SandboxFiles(session)
        try:
            await files.awrite_chunks(archive, iter_chunks(spool))
            unpack = 'mkdir -p -- "$2" && exec tar xf "$1" -C "$2"'
            await _checked(session, ["sh", "-c", unpack, "sh", archive, directory])
        finally:
            await _remove_quietly(files, archive)


async def _checked(session: Session, argv: list[str]) -> None:
    done = await arun_command(session, argv)
    if done.exit_code != 0:
        detail = done.stderr.decode("utf-8", errors="replace").strip()[-500:]
        raise ArchiveCommandError(
            f"{argv[0]} exited with {done.exit_code}: {detail}",
            exit_code=done.exit_code,
            stderr=done.stderr,
        )


async def _remove_quietly(files: SandboxFiles, path: str) -> None:
    # A temporary file in /tmp: the sandbox's end removes it anyway.
    with contextlib.suppress(LizardIntegrationError, OSError):
        await files.aremove(path)
