"""Files at a path the sandbox resolves: the check and the transfer in one request.

A path checked on the host is checked lexically only: ``work/link`` passes, and the symlink it
names may lead anywhere in the sandbox. A framework that confines its file tools to a workspace
(the OpenAI Agents SDK, E2B's client of it) resolves the path *in the sandbox* with a script.
These functions run such a :class:`Resolver` and use the path it prints in the same request.

Contract (proven against lizard-local in ``tests/test_resolved_files.py``):

- **The resolver decides.** It is a POSIX ``sh`` script run with its ``args``; it prints the
  path to use, or exits non-zero: that is :class:`PathRefusedError` with its exit code and
  stderr, and nothing is read or written.
- **One request** for :func:`aresolve`, for a read of up to ``small_read`` bytes and for a
  write of up to :data:`SMALL_WRITE` bytes. A larger file is streamed in
  :data:`~lizard_core.files.CHUNK_SIZE` chunks (:class:`~lizard_core.files.SandboxFiles`): the
  host holds at most a chunk, plus ``spool_memory`` for a read (spooled to a temporary file past
  that, so the caller gets a seekable file).
- **As ``user``.** The resolver and every byte moved run as that user: a large transfer goes
  through a stage only root and that user can touch
  (:func:`~lizard_core.transfers.astage_for_user`), copied by the user's own process (two more
  requests and the stage's removal), so it never reaches what the user could not.
- **Errors.** A missing file to read is ``FileNotFoundError``, a directory
  ``IsADirectoryError`` (both naming the resolved path); another failure in the sandbox is an
  ``OSError`` with its exit code and stderr. Failures of the sandbox itself are
  :class:`~lizard_core.errors.LizardIntegrationError`. A write creates the parent directories.
"""

from __future__ import annotations

import contextlib
import errno
import io
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Final

from lizard_core.archives import iter_chunks
from lizard_core.commands import INPUT_INLINE, STREAM_BUDGET, CommandResult, arun_command
from lizard_core.errors import PathRefusedError
from lizard_core.files import SandboxFiles
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

# Our exit codes; a refusing resolver's own code is printed on stdout (so none is ambiguous).
_MISSING, _IS_DIR, _LARGE, _REFUSED = 65, 66, 75, 90
# $1: the resolver; $2..: its arguments.
_RESOLVE = (
    'resolver=$1; shift; p=$(sh -c "$resolver" sh "$@") '
    f'|| {{ printf %s "$?"; exit {_REFUSED}; }}; '
)
# $LIZARD_STAGE (when set): the stage a large transfer as another user goes through.
_READ: Final = (
    _RESOLVE + f'[ -e "$p" ] || {{ printf %s "$p"; exit {_MISSING}; }}; '
    f'[ ! -d "$p" ] || {{ printf %s "$p"; exit {_IS_DIR}; }}; '
    'if [ -n "$LIZARD_STAGE" ]; then exec cat -- "$p" > "$LIZARD_STAGE"; fi; '
    'if [ "$(wc -c < "$p")" -gt "$LIZARD_SMALL" ]; then printf %s "$p"; exit '
    f'{_LARGE}; fi; exec cat -- "$p"'
)
_WRITE: Final = (
    _RESOLVE + f'[ ! -d "$p" ] || {{ printf %s "$p"; exit {_IS_DIR}; }}; '
    'mkdir -p -- "$(dirname -- "$p")" || exit $?; '
    'if [ -n "$LIZARD_STAGE" ]; then exec cat -- "$LIZARD_STAGE" > "$p"; fi; '
    'if [ "$LIZARD_STREAMED" = 1 ]; then printf %s "$p"; else exec cat > "$p"; fi'
)


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
    """Raise the error a transfer script's exit code means (see the module docstring)."""
    code = result.exit_code
    if code == 0 or code in also_fine:
        return result
    if code == _REFUSED and result.stdout.isdigit():
        raise PathRefusedError(int(result.stdout), _text(result.stderr)[-2000:])
    if code == _MISSING:
        raise FileNotFoundError(errno.ENOENT, "No such file", result.stdout.decode())
    if code == _IS_DIR:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", result.stdout.decode())
    raise OSError(errno.EIO, f"the transfer failed (exit {code}): {_text(result.stderr)[-2000:]}")


async def _run(
    session: Session,
    script: str,
    resolver: Resolver,
    user: str | None,
    env: Mapping[str, str],
    input: bytes | None = None,
) -> CommandResult:
    argv = ["sh", "-c", script, "sh", resolver.script, *resolver.args]
    return await arun_command(session, argv, cwd="/", env=env, user=user, input=input)


async def aresolve(session: Session, resolver: Resolver, *, user: str | None = None) -> str:
    """The path ``resolver`` prints (one request); :class:`PathRefusedError` if it refuses."""
    argv = ["sh", "-c", resolver.script, "sh", *resolver.args]
    result = await arun_command(session, argv, cwd="/", user=user)
    if result.exit_code != 0:
        raise PathRefusedError(result.exit_code, _text(result.stderr)[-2000:])
    if not (path := _text(result.stdout)):
        raise OSError(errno.EIO, "the resolver printed no path")
    return path


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
    env = {"LIZARD_STAGE": "", "LIZARD_SMALL": str(small_read)}
    result = _checked(await _run(session, _READ, resolver, user, env), _LARGE)
    if result.exit_code == 0:
        return io.BytesIO(result.stdout)
    spool = tempfile.SpooledTemporaryFile(max_size=spool_memory)  # noqa: SIM115  # returned
    try:
        async with contextlib.AsyncExitStack() as stack:
            source = result.stdout.decode()
            if user is not None:  # copied by the user's own process into a stage
                source = await stack.enter_async_context(astage_for_user(session, user))
                staged = {**env, "LIZARD_STAGE": source}
                _checked(await _run(session, _READ, resolver, user, staged))
            async for piece in SandboxFiles(session).aiter_bytes(source):
                spool.write(piece)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


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
    streamed = len(head) > SMALL_WRITE
    env = {"LIZARD_STAGE": "", "LIZARD_STREAMED": "1" if streamed else "0"}
    stdin = None if streamed else head
    result = _checked(await _run(session, _WRITE, resolver, user, env, input=stdin))
    if not streamed:
        return

    def pieces() -> Iterator[bytes]:
        yield head
        yield from iter_chunks(stream)

    files = SandboxFiles(session)
    if user is None:
        await files.awrite_chunks(result.stdout.decode(), pieces())
        return
    async with astage_for_user(session, user) as stage:  # copied into place by the user
        await files.awrite_chunks(stage, pieces())
        env = {"LIZARD_STAGE": stage, "LIZARD_STREAMED": "0"}
        _checked(await _run(session, _WRITE, resolver, user, env))
