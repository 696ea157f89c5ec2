"""``LizardSandboxSession``: the SDK's sandbox session on one ``lizard_core.Session``.

Contract (proven against lizard-local in ``tests/``):

- **Exec.** One request per command through ``lizard_core.commands``: argv boundaries kept,
  raw stdout/stderr bytes, the real exit code, run in the manifest root (created if missing)
  with the options' and the manifest's environment (the manifest wins) and nothing from the
  host. The SDK's ``sudo -u USER --`` prefix becomes ``lizard_core``'s ``user=``. A timeout is
  ``ExecTimeoutError``; cancelling the task stops the command's process group.
- **Paths are resolved in the sandbox.** The SDK's own resolver (``resolve-workspace-path``)
  decides, so a symlink out of the workspace is refused like ``../``. For ``read`` and
  ``write`` it runs in the same request as the transfer.
- **Read / write.** A small file is one request each way. A larger one is streamed in
  ``lizard_core.files`` chunks: the host holds at most a chunk plus :data:`SPOOL_MEMORY` (a
  read is spooled to a temporary file past that, since the SDK reads the stream synchronously).
  With ``user=``, every byte is read or written by that user's own process: a large transfer
  goes through a stage only root and that user can touch, copied by the user's process, so it
  can never reach what the user could not (two more requests).
- **Persist / hydrate** (``workspace_persistence="tar"``): a tar of the workspace root with
  workspace-relative members, made and unpacked in the sandbox, moved through the host in
  chunks. A tar to hydrate is checked on the host first (no absolute paths, no ``..``, no hard
  links or devices, nothing under a symlink, at most :data:`HYDRATE_MEMBERS` members).
- **Shutdown** destroys the sandbox; again is harmless. ``running()`` asks the platform.
- **PTY.** ``pty_exec_start`` keeps the process in the sandbox (``lizard_core.interactive``,
  under a terminal when ``tty=True``); each start and each ``pty_write_stdin`` is one request that
  returns the output of its ``yield_time_s``. The SDK's shell tool then offers ``write_stdin``.
  At most the SDK's ``PTY_PROCESSES_MAX`` are kept: a start past it ends the least recently
  used (as the SDK's E2B client does); ``stop()`` / ``shutdown()`` end them all.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final, Literal

from agents.sandbox.errors import (
    ExecNonZeroError,
    InvalidManifestPathError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceStopError,
)
from agents.sandbox.session import pty_types
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
    truncate_text_by_tokens,
)
from agents.sandbox.session.runtime_helpers import RESOLVE_WORKSPACE_PATH_HELPER
from agents.sandbox.types import ExecResult, User
from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tarfile
from agents.sandbox.workspace_paths import coerce_posix_path

from lizard_core import errors as core
from lizard_core.commands import INPUT_INLINE, STREAM_BUDGET, CommandResult, arun_command
from lizard_core.files import CHUNK_SIZE, SandboxFiles
from lizard_core.interactive import InteractiveProcess, Update, astart_interactive
from lizard_core.session import Session

from ._errors import exec_errors, failure_context, workspace_errors
from ._options import LizardSandboxSessionState

__all__ = ["HYDRATE_MEMBERS", "SPOOL_MEMORY", "LizardSandboxSession"]

SPOOL_MEMORY: Final = 8 * 1024 * 1024
"""Bytes of a streamed read or archive held in memory before it spills to a temporary file."""
HYDRATE_MEMBERS = 500_000
"""Most members a tar to hydrate may hold: one with more is refused, its headers read no further
(the host keeps each header read, about 1 KiB)."""
SMALL_READ: Final = STREAM_BUDGET
"""Files up to this size come back inside the one exec that resolves their path."""
SMALL_WRITE: Final = INPUT_INLINE - 64 * 1024
"""Writes up to this size travel as the stdin of the one exec that resolves their path."""

# Exit codes of the transfer scripts below; the resolver's own pass through: 111 the path
# escapes, 114 it is under a read-only grant (others, like a symlink loop, fail the transfer).
_MISSING, _IS_DIR, _LARGE = 65, 66, 75
_ESCAPED, _READ_ONLY = 111, 114

# $1: the SDK's resolver; $2..: its arguments (root, path, mode, grants).
_RESOLVE = 'helper=$1; shift; p=$(sh -c "$helper" sh "$@") || exit $?; '
# $LIZARD_STAGE (when set): the staged copy a large transfer as another user goes through.
_READ_SCRIPT = (
    _RESOLVE + f'[ -e "$p" ] || exit {_MISSING}; [ ! -d "$p" ] || exit {_IS_DIR}; '
    'if [ -n "$LIZARD_STAGE" ]; then exec cat -- "$p" > "$LIZARD_STAGE"; fi; '
    f'if [ "$(wc -c < "$p")" -gt {SMALL_READ} ]; then printf %s "$p"; exit {_LARGE}; fi; '
    'exec cat -- "$p"'
)
_WRITE_SCRIPT = (
    _RESOLVE + f'[ ! -d "$p" ] || exit {_IS_DIR}; mkdir -p -- "$(dirname -- "$p")" || exit $?; '
    'if [ -n "$LIZARD_STAGE" ]; then exec cat -- "$LIZARD_STAGE" > "$p"; fi; '
    'if [ "$LIZARD_STREAMED" = 1 ]; then printf %s "$p"; else exec cat > "$p"; fi'
)
# A file only root and $1 can touch, in a folder nobody else can change: a user's large
# transfer is copied through it by the user's own process, so the user's rights apply.
_STAGE_SCRIPT = (
    'd=$(mktemp -d /tmp/.openai-agents-lizard-XXXXXXXX) && chmod 711 "$d" && : > "$d/data" '
    '&& chown -- "$1" "$d/data" && chmod 600 "$d/data" && printf %s "$d/data"'
)


_NO_STAGE: Final = {"LIZARD_STAGE": ""}


def _failure(result: CommandResult) -> dict[str, object]:
    return {"exit_code": result.exit_code, "stderr": result.stderr.decode(errors="replace")}


def _check_read(target: Path, result: CommandResult, *also_fine: int) -> None:
    if result.exit_code == _MISSING:
        raise WorkspaceReadNotFoundError(path=target)
    if result.exit_code != 0 and result.exit_code not in also_fine:
        raise WorkspaceArchiveReadError(path=target, context=_failure(result))


def _check_written(target: Path, result: CommandResult) -> None:
    if result.exit_code != 0:
        raise WorkspaceArchiveWriteError(path=target, context=_failure(result))


def _count_members(tar: tarfile.TarFile) -> None:
    # Read lazily, so a tar with millions of members stops here, not in the host's memory.
    for count, _ in enumerate(tar, start=1):
        if count > HYDRATE_MEMBERS:
            raise UnsafeTarMemberError(member="<tar>", reason="too many members")


def _chunks(stream: IO[bytes] | io.IOBase) -> Iterator[bytes]:
    while piece := stream.read(CHUNK_SIZE):
        yield piece.encode() if isinstance(piece, str) else bytes(piece)


def _spool() -> tempfile.SpooledTemporaryFile[bytes]:
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)


class LizardSandboxSession(BaseSandboxSession):
    """A sandbox session on one Lizard sandbox (see the module docstring)."""

    state: LizardSandboxSessionState

    def __init__(self, *, state: LizardSandboxSessionState, session: Session) -> None:
        self.state = state
        self._session = session
        self._files = SandboxFiles(session)
        self._ptys: dict[int, InteractiveProcess] = {}
        self._pty_used: dict[int, float] = {}  # process id -> when it was last started or fed

    @property
    def sandbox_id(self) -> str:
        """The Lizard sandbox's id."""
        return self.state.sandbox_id

    # ── the SDK's hooks ──────────────────────────────────────────────────

    def _runtime_helpers(self) -> tuple[object, ...]:  # type: ignore[override]
        return (RESOLVE_WORKSPACE_PATH_HELPER,)

    def _current_runtime_helper_cache_key(self) -> object | None:
        return self.state.sandbox_id

    async def _validate_path_access(self, path: Path | str, *, for_write: bool = False) -> Path:
        return await self._validate_remote_path_access(path, for_write=for_write)

    async def _shutdown_backend(self) -> None:
        try:
            await self._session.adestroy()
        except core.LizardIntegrationError as error:
            root = self._workspace_root_path()
            raise WorkspaceStopError(path=root, context=failure_context(error)) from error

    async def running(self) -> bool:
        """Whether the sandbox still exists (one ``GET``)."""
        if self._session.destroyed or not self.state.sandbox_id:
            return False
        try:
            await self._session.acheck_alive()
        except core.LizardIntegrationError:
            return False
        return True

    # ── exec ─────────────────────────────────────────────────────────────

    async def _environment(self) -> dict[str, str]:
        manifest_env = await self.state.manifest.environment.resolve()
        merged = {**(self.state.envs or {}), **manifest_env}
        return {key: value for key, value in merged.items() if value is not None}

    async def _run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109  # the command's own limit, in the guest
        user: str | None = None,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> CommandResult:
        with exec_errors(argv, timeout):
            return await arun_command(
                self._session,
                argv,
                cwd=self.state.manifest.root,
                create_cwd=True,
                env={**await self._environment(), **(env or {})},
                timeout=timeout,
                user=user,
                input=input,
            )

    async def _exec_internal(
        self,
        *command: str | Path,
        timeout: float | None = None,  # noqa: ASYNC109  # the SDK's signature
    ) -> ExecResult:
        argv = [str(part) for part in command]
        user = None
        # SandboxSession.exec prefixes `sudo -u USER --`; Lizard switches users itself.
        if len(argv) >= 4 and argv[0] == "sudo" and argv[1] == "-u" and argv[3] == "--":
            user, argv = argv[2], argv[4:]
        result = await self._run(argv, timeout=timeout, user=user)
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

    # ── PTY: an interactive process kept in the sandbox ──────────────────

    def supports_pty(self) -> bool:
        return True

    async def _pty_update(
        self, process_id: int, update: Update, max_output_tokens: int | None
    ) -> PtyExecUpdate:
        text, original = truncate_text_by_tokens(
            update.output.decode("utf-8", errors="replace"), max_output_tokens
        )
        if update.exit_code is not None:
            self._ptys.pop(process_id, None)
            self._pty_used.pop(process_id, None)
        else:
            self._pty_used[process_id] = time.monotonic()
        return PtyExecUpdate(
            process_id=None if update.exit_code is not None else process_id,
            output=text.encode(),
            exit_code=update.exit_code,
            original_token_count=original,
        )

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,  # noqa: ASYNC109  # the SDK's signature
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Start a process kept in the sandbox; its output of the first ``yield_time_s``."""
        argv = self._prepare_exec_command(*command, shell=shell, user=None)
        name = user.name if isinstance(user, User) else user
        # The SDK's defaults, as its E2B client has them: 10 s for a start, 250 ms for a write.
        wait = clamp_pty_yield_time_ms(int((yield_time_s or 10.0) * 1000)) / 1000
        with exec_errors(argv, timeout):
            process, update = await astart_interactive(
                self._session,
                argv,
                cwd=self.state.manifest.root,
                env=await self._environment(),
                user=name,
                tty=tty,
                wait=wait,
                timeout=timeout,
            )
        process_id = allocate_pty_process_id(set(self._ptys))
        pruned = self._prune_ptys()
        self._ptys[process_id] = process
        if pruned is not None:
            with contextlib.suppress(core.LizardIntegrationError):
                await pruned.aterminate()
        return await self._pty_update(process_id, update, max_output_tokens)

    def _prune_ptys(self) -> InteractiveProcess | None:
        """At the SDK's limit of kept processes, the least recently used to end (as E2B does)."""
        if len(self._ptys) < pty_types.PTY_PROCESSES_MAX:
            return None
        meta = [(pid, self._pty_used.get(pid, 0.0), False) for pid in self._ptys]
        victim = process_id_to_prune_from_meta(meta)
        if victim is None:
            return None
        self._pty_used.pop(victim, None)
        return self._ptys.pop(victim, None)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Feed ``chars`` to a kept process; its output within ``yield_time_s``."""
        process = self._resolve_pty_session_entry(pty_processes=self._ptys, session_id=session_id)
        wait_ms = resolve_pty_write_yield_time_ms(
            yield_time_ms=int((yield_time_s or 0.25) * 1000), input_empty=chars == ""
        )
        with exec_errors(["write_stdin"], None):
            try:
                update = await process.afeed(chars.encode(), wait=wait_ms / 1000)
            except BrokenPipeError:  # it ended since the last call: its last output and exit
                update = await process.afeed(b"", wait=0)
        return await self._pty_update(session_id, update, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        processes, self._ptys, self._pty_used = list(self._ptys.values()), {}, {}
        for process in processes:
            # A sandbox already gone ended them too.
            with contextlib.suppress(core.LizardIntegrationError):
                await process.aterminate()

    # ── files ────────────────────────────────────────────────────────────

    async def _transfer(
        self,
        script: str,
        path: Path | str,
        mode: Literal["0", "1"],
        user: str | None,
        **kwargs: object,
    ) -> tuple[Path, CommandResult]:
        """Resolve ``path`` in the sandbox and run ``script`` on it, in one request."""
        policy = self._workspace_path_policy()
        target = Path(self.normalize_path(path, for_write=mode == "1"))
        grants = [
            arg
            for root, read_only in policy.extra_path_grant_rules()
            for arg in (root.as_posix(), "1" if read_only else "0")
        ]
        argv = ["sh", "-c", script, "sh", RESOLVE_WORKSPACE_PATH_HELPER.content]
        argv += [policy.sandbox_root().as_posix(), target.as_posix(), mode, *grants]
        result = await self._run(argv, user=user, **kwargs)  # type: ignore[arg-type]
        if result.exit_code == _READ_ONLY and mode == "1":
            context = {"reason": "read_only_extra_path_grant", "path": target.as_posix()}
            raise WorkspaceArchiveWriteError(path=target, context=context)
        if result.exit_code == _ESCAPED:
            original = coerce_posix_path(path)
            reason: Literal["absolute", "escape_root"] = (
                "absolute" if original.is_absolute() else "escape_root"
            )
            detail = result.stderr.decode("utf-8", errors="replace").strip()
            raise InvalidManifestPathError(
                rel=original.as_posix(), reason=reason, context={"detail": detail}
            )
        return target, result

    async def _stage(self, user: str) -> str:
        """A private file for one large transfer as ``user`` (see ``_STAGE_SCRIPT``)."""
        done = await self._run(["sh", "-c", _STAGE_SCRIPT, "sh", user])
        if done.exit_code != 0:
            raise PermissionError(f"cannot stage a transfer for user {user!r}: {done.stderr!r}")
        return done.stdout.decode()

    async def read(self, path: Path | str, *, user: str | User | None = None) -> io.IOBase:
        """The file's bytes as a stream: one request up to :data:`SMALL_READ`, else chunks.

        A large file read as ``user`` is first copied by that user's process into a private
        stage, so only what the user can read ever leaves the sandbox.
        """
        name = user.name if isinstance(user, User) else user
        target, result = await self._transfer(_READ_SCRIPT, path, "0", name, env=_NO_STAGE)
        _check_read(target, result, _LARGE)
        if result.exit_code == 0:
            return io.BytesIO(result.stdout)
        source, stage = result.stdout.decode(), None
        spool = _spool()
        try:
            if name is not None:
                with workspace_errors(target, write=False):
                    source = stage = await self._stage(name)
                env = {"LIZARD_STAGE": stage}
                _check_read(
                    target, (await self._transfer(_READ_SCRIPT, path, "0", name, env=env))[1]
                )
            with workspace_errors(target, write=False):
                async for piece in self._files.aiter_bytes(source):
                    spool.write(piece)
        except BaseException:
            spool.close()
            raise
        finally:
            if stage is not None:
                await self._remove_quietly(posixpath.dirname(stage))
        spool.seek(0)
        return spool  # an io.IOBase since Python 3.11

    async def write(
        self, path: Path | str, data: io.IOBase, *, user: str | User | None = None
    ) -> None:
        """Write ``data``: one request up to :data:`SMALL_WRITE`, else streamed in chunks."""
        head = data.read(SMALL_WRITE + 1)
        head = head.encode() if isinstance(head, str) else bytes(head or b"")
        streamed = len(head) > SMALL_WRITE
        env = {**_NO_STAGE, "LIZARD_STREAMED": "1" if streamed else "0"}
        stdin = None if streamed else head
        name = user.name if isinstance(user, User) else user
        target, result = await self._transfer(_WRITE_SCRIPT, path, "1", name, input=stdin, env=env)
        _check_written(target, result)
        if not streamed:
            return

        def pieces() -> Iterator[bytes]:
            yield head
            yield from _chunks(data)

        if name is None:
            with workspace_errors(target, write=True):
                await self._files.awrite_chunks(result.stdout.decode(), pieces())
            return
        # As another user: staged, then copied into place by that user's own process.
        with workspace_errors(target, write=True):
            stage = await self._stage(name)
        try:
            with workspace_errors(target, write=True):
                await self._files.awrite_chunks(stage, pieces())
            env = {"LIZARD_STAGE": stage, "LIZARD_STREAMED": "0"}
            _check_written(
                target, (await self._transfer(_WRITE_SCRIPT, path, "1", name, env=env))[1]
            )
        finally:
            await self._remove_quietly(posixpath.dirname(stage))

    # ── workspace persistence ────────────────────────────────────────────

    def _archive_path(self) -> str:
        return f"/tmp/openai-agents-lizard-{uuid.uuid4().hex}.tar"

    async def _checked(
        self,
        argv: list[str],
        error: type[WorkspaceArchiveReadError | WorkspaceArchiveWriteError],
        root: Path,
    ) -> None:
        done = await self._run(argv)
        if done.exit_code != 0:
            result = ExecResult(stdout=done.stdout, stderr=done.stderr, exit_code=done.exit_code)
            raise error(path=root, cause=ExecNonZeroError(result, command=argv))

    async def persist_workspace(self) -> io.IOBase:
        """A tar of the workspace root, members relative to it, spooled on the host."""
        root = self._workspace_root_path()
        archive = self._archive_path()
        skip = sorted(p.as_posix() for p in self._persist_workspace_skip_relpaths())
        excludes = [f"--exclude=./{rel}" for rel in skip]
        spool = _spool()
        try:
            tar = ["tar", "cf", archive, "--no-wildcards", *excludes, "-C", root.as_posix(), "."]
            await self._checked(tar, WorkspaceArchiveReadError, root)
            with workspace_errors(root, write=False):
                async for piece in self._files.aiter_bytes(archive):
                    spool.write(piece)
        except BaseException:
            spool.close()
            raise
        finally:
            await self._remove_quietly(archive)
        spool.seek(0)
        return spool

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """Unpack a tar made by :meth:`persist_workspace` under the workspace root."""
        root = self._workspace_root_path()
        with _spool() as spool:
            for piece in _chunks(data):
                spool.write(piece)
            spool.seek(0)
            try:
                with tarfile.open(fileobj=spool, mode="r:*") as checked:
                    _count_members(checked)
                    # Symlinks out stay links (a virtualenv has them); no member goes under one,
                    # and reads and writes resolve paths in the sandbox.
                    validate_tarfile(checked)
            except UnsafeTarMemberError as error:
                context = {"reason": error.reason, "member": error.member}
                raise WorkspaceArchiveWriteError(path=root, context=context, cause=error) from error
            except (tarfile.TarError, ValueError, OSError) as error:
                raise WorkspaceArchiveWriteError(path=root, cause=error) from error
            spool.seek(0)
            archive = self._archive_path()
            try:
                with workspace_errors(root, write=True):
                    await self._files.awrite_chunks(archive, _chunks(spool))
                unpack = 'mkdir -p -- "$2" && exec tar xf "$1" -C "$2"'
                argv = ["sh", "-c", unpack, "sh", archive, root.as_posix()]
                await self._checked(argv, WorkspaceArchiveWriteError, root)
            finally:
                await self._remove_quietly(archive)

    async def _remove_quietly(self, path: str) -> None:
        # A temporary file in /tmp: the sandbox's end removes it anyway.
        with contextlib.suppress(core.LizardIntegrationError, OSError):
            await self._files.aremove(path)

    def __repr__(self) -> str:
        return f"LizardSandboxSession(sandbox_id={self.state.sandbox_id!r})"
