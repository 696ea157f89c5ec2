"""Files at a path the sandbox resolves: the check and the transfer in one request.

A path checked on the host is checked lexically only: ``work/link`` passes, and the symlink it
names may lead anywhere in the sandbox. A framework that confines its file tools to a workspace
(the OpenAI Agents SDK, E2B's client of it) resolves the path *in the sandbox* with a script.
These functions run such a :class:`Resolver` and use the path it prints in the same request.

Contract (proven against lizard-local in ``tests/test_resolved_files.py``):

- **The resolver decides.** It is a POSIX ``sh`` script run with its ``args``; it prints the
  path to use (one line), or exits non-zero: that is :class:`PathRefusedError` with its exit
  code and stderr, and nothing is read or written. A printed path that is not absolute and
  canonical is an ``OSError``; a resolver that runs past 60 s is ``OSError(ETIMEDOUT)``.
- **No symlink after the check.** The transfer opens the printed path from ``/`` one
  component at a time without following symlinks (a small program in the sandbox's
  ``python3``): a component swapped for a symlink since it was resolved is
  ``OSError(ELOOP)``, and nothing is read or written through it. The path is never opened
  again by a later request. Reading anything but a regular file (a FIFO, socket or device) is
  ``OSError(EINVAL)``, writing to a FIFO nobody reads ``ENXIO``: neither blocks.
- **Cost.** One request for :func:`aresolve`, for a read of up to ``small_read`` bytes and for
  a write of up to :data:`SMALL_WRITE` bytes. A larger read is copied to a job file in that
  request and fetched with one ``GET files``; a larger write is uploaded in
  :data:`~lizard_core.files.CHUNK_SIZE` chunks (one ``POST files`` each) and copied into place
  by the one request that resolves its path. The host holds at most a chunk, plus
  ``spool_memory`` for a read (spooled to a temporary file past that, so the caller gets a
  seekable file).
- **As ``user``.** The resolver and every byte moved run as that user: a large transfer goes
  through a stage only root and that user can touch
  (:func:`~lizard_core.transfers.astage_for_user`), copied by the user's own process (two more
  requests and the stage's removal), so it never reaches what the user could not.
- **Errors.** Failures in the sandbox are the builtin ``OSError`` subclass for their errno,
  naming the resolved path (``FileNotFoundError``, ``IsADirectoryError``,
  ``PermissionError``, ``NotADirectoryError``, ...). Failures of the sandbox itself are
  :class:`~lizard_core.errors.LizardIntegrationError`. A write creates the parent directories
  and truncates an existing file in place (its mode and owner kept).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final

from lizard_core._bridge import run_blocking
from lizard_core._chunks import rechunk
from lizard_core._jobs import JOBS_ROOT, schedule_cleanup
from lizard_core._resolved_program import (
    EXIT_BAD_PATH,
    EXIT_ERRNO,
    EXIT_LARGE,
    EXIT_REFUSED,
    EXIT_TIMEOUT,
    PROGRAM,
)
from lizard_core._spill import open_spill
from lizard_core.archives import iter_chunks
from lizard_core.commands import INPUT_INLINE, STREAM_BUDGET, CommandResult, arun_command
from lizard_core.errors import GuestProtocolError, PathRefusedError
from lizard_core.files import CHUNK_SIZE, SandboxFiles
from lizard_core.session import Session
from lizard_core.transfers import astage_for_user

__all__ = [
    "RESOLVER_LIMIT",
    "SMALL_WRITE",
    "SPOOL_MEMORY",
    "PathRefusedError",
    "Resolver",
    "aread_resolved",
    "aresolve",
    "awrite_resolved",
]

RESOLVER_LIMIT: Final = 48 * 1024
"""Most bytes of a resolver's script and arguments (they travel in the transfer's request)."""
SMALL_WRITE: Final = INPUT_INLINE - 64 * 1024
"""Writes up to this size travel in the one request that resolves their path."""
SPOOL_MEMORY: Final = 8 * 1024 * 1024
"""Bytes of a streamed read held in memory before it spills to a temporary file."""

TRANSFER_TIMEOUT_S: Final = 600.0
"""Most seconds one transfer's command runs in the sandbox (the resolver gets 60 of them)."""
_RESOLVER_S: Final = 60.0
_PROGRAM: Final = ("python3", "-I", "-S", "-c", PROGRAM)


@dataclass(frozen=True)
class Resolver:
    """A POSIX ``sh`` script that prints the path to use for ``args``, or exits non-zero."""

    script: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.script, str) or not all(isinstance(a, str) for a in self.args):
            raise TypeError("a resolver is a script (str) and its arguments (str)")
        if any("\0" in part for part in (self.script, *self.args)):
            raise ValueError("a resolver's script and arguments cannot hold NUL")
        if len(self.script) + sum(len(a) + 1 for a in self.args) > RESOLVER_LIMIT:
            raise ValueError(f"a resolver's script and arguments exceed {RESOLVER_LIMIT} bytes")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _checked(result: CommandResult, *also_fine: int) -> CommandResult:
    """Raise the error the program's exit code means (see ``_resolved_program``)."""
    code, out = result.exit_code, result.stdout
    if code == 0 or code in also_fine:
        return result
    detail = _text(result.stderr)[-2000:]
    if code == EXIT_REFUSED and out.isdigit() and len(out) < 6:
        raise PathRefusedError(int(out), detail)
    number, _, name = out.partition(b"\n")
    if code == EXIT_ERRNO and number.isdigit() and len(number) < 6:
        raise OSError(int(number), detail or os.strerror(int(number)), os.fsdecode(name))
    if code == EXIT_BAD_PATH:
        raise OSError(errno.EIO, detail)
    if code == EXIT_TIMEOUT:
        raise OSError(errno.ETIMEDOUT, detail)
    raise OSError(errno.EIO, f"the transfer failed (exit {code}): {detail}")


async def _run(
    session: Session,
    op: str,
    resolver: Resolver,
    user: str | None,
    *,
    small: int = 0,
    stage: str = "",
    new_job: bool = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
) -> CommandResult:
    argv = [*_PROGRAM, op, str(small), stage, "1" if new_job else "0", str(_RESOLVER_S)]
    return await arun_command(
        session,
        [*argv, resolver.script, *resolver.args],
        cwd="/",
        env=env or {},
        user=user,
        input=input,
        timeout=TRANSFER_TIMEOUT_S,
    )


async def aresolve(session: Session, resolver: Resolver, *, user: str | None = None) -> str:
    """The path ``resolver`` prints (one request); :class:`PathRefusedError` if it refuses."""
    argv = ["sh", "-c", resolver.script, "sh", *resolver.args]
    result = await arun_command(session, argv, cwd="/", user=user, timeout=_RESOLVER_S)
    if result.exit_code != 0:
        raise PathRefusedError(result.exit_code, _text(result.stderr)[-2000:])
    # One line: a name may begin or end with spaces.
    path = os.fsdecode(result.stdout.removesuffix(b"\n"))
    if not path:
        raise OSError(errno.EIO, "the resolver printed no path")
    return path


def _large_size(result: CommandResult) -> int:
    out = result.stdout
    if not (out.isdigit() and len(out) < 20):
        raise GuestProtocolError(f"a staged read reported no size: {out[:100]!r}")
    return int(out)


def _fetch_into(session: Session, sandbox: Any, path: str, size: int, spool: IO[bytes]) -> None:
    """Stream the stage ``path`` (``size`` bytes, no more believed) into ``spool``."""
    received = 0
    with open_spill(session, sandbox, path, size) as pieces:
        for piece in pieces:
            spool.write(piece)
            received += len(piece)
    if received != size:
        raise GuestProtocolError(f"Read {received} of {size} staged bytes.")


async def aread_resolved(
    session: Session,
    resolver: Resolver,
    *,
    user: str | None = None,
    small_read: int = STREAM_BUDGET,
    spool_memory: int = SPOOL_MEMORY,
) -> io.BytesIO | tempfile.SpooledTemporaryFile[bytes]:
    """The bytes of the file ``resolver`` names, as a file positioned at its start.

    ``small_read`` (at most the command stream budget) is the largest file that comes back in
    the one request; see the module docstring for the rest.
    """
    if not 0 <= small_read <= STREAM_BUDGET:
        raise ValueError(f"small_read must be between 0 and {STREAM_BUDGET}")
    sandbox = await session.asandbox()
    spool = tempfile.SpooledTemporaryFile(max_size=spool_memory)  # noqa: SIM115  # returned
    try:
        async with contextlib.AsyncExitStack() as stack:
            if user is None:  # copied, in the request that resolves it, to a new job file
                job = f"{JOBS_ROOT}/{uuid.uuid4().hex[:16]}"
                stage = f"{job}/data"
                stack.callback(schedule_cleanup, sandbox, job)
                result = await _run(
                    session, "read", resolver, None, small=small_read, stage=stage, new_job=True
                )
            else:  # the user's process copies a large file into a stage only root and it touch
                result = await _run(session, "read", resolver, user, small=small_read)
                if _checked(result, EXIT_LARGE).exit_code == EXIT_LARGE:
                    stage = await stack.enter_async_context(astage_for_user(session, user))
                    result = await _run(
                        session, "read", resolver, user, small=small_read, stage=stage
                    )
            if _checked(result, EXIT_LARGE).exit_code == 0:
                spool.close()
                return io.BytesIO(result.stdout)
            await run_blocking(_fetch_into, session, sandbox, stage, _large_size(result), spool)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _upload(session: Session, sandbox: Any, job: str, chunks: Iterator[bytes]) -> list[str]:
    """Each chunk to a job file of its own (one ``POST files`` each); their paths."""
    staged = []
    for index, chunk in enumerate(chunks):
        name = f"{job}/w{index:06d}"
        session.call(
            session.transport().write_bytes, str(sandbox.sandbox_id), name, chunk, idempotent=True
        )
        staged.append(name)
    return staged


async def awrite_resolved(
    session: Session,
    resolver: Resolver,
    data: bytes | IO[bytes] | IO[str],
    *,
    user: str | None = None,
) -> None:
    """Write ``data`` (bytes, or a file read to its end) to the file ``resolver`` names."""
    stream: IO[bytes] | IO[str] = io.BytesIO(data) if isinstance(data, bytes) else data
    first = stream.read(SMALL_WRITE + 1)
    head = first.encode() if isinstance(first, str) else bytes(first or b"")
    if len(head) <= SMALL_WRITE:
        _checked(await _run(session, "write", resolver, user, input=head))
        return

    def pieces() -> Iterator[bytes]:
        yield head
        yield from iter_chunks(stream)

    if user is None:  # uploaded first, then resolved and copied into place in one request
        sandbox = await session.asandbox()
        job = f"{JOBS_ROOT}/{uuid.uuid4().hex[:16]}"
        try:
            staged = await run_blocking(
                _upload, session, sandbox, job, rechunk(pieces(), CHUNK_SIZE)
            )
            env = {"LIZARD_STAGED": ":".join(staged)}
            _checked(await _run(session, "write", resolver, None, env=env))
        finally:
            schedule_cleanup(sandbox, job)
        return
    async with astage_for_user(session, user) as stage:  # copied into place by the user
        await SandboxFiles(session).awrite_chunks(stage, pieces())
        _checked(await _run(session, "write", resolver, user, env={"LIZARD_STAGED": stage}))
