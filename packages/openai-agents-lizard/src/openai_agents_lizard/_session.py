"""``LizardSandboxSession``: the SDK's sandbox session on one ``lizard_core.Session``.

Contract (proven against lizard-local in ``tests/``):

- **Exec.** One request per command through ``lizard_core.commands``: argv boundaries kept,
  raw stdout/stderr bytes, the real exit code, run in the manifest root (created if missing)
  with the options' and the manifest's environment (the manifest wins) and nothing from the
  host. The SDK's ``sudo -u USER --`` prefix becomes ``lizard_core``'s ``user=``. A timeout is
  ``ExecTimeoutError``; cancelling the task stops the command's process group.
- **Paths are resolved in the sandbox** by the SDK's own resolver (``resolve-workspace-path``),
  run inline (nothing installed), so a symlink out of the workspace is refused like ``../``;
  for ``read`` and ``write`` in the same request as the transfer
  (``lizard_core.resolved_files``: a small file is one request, a large one streamed in
  chunks with bounded host memory, and with ``user=`` every byte is moved by that user).
- **Persist / hydrate** (``workspace_persistence="tar"``): a tar of the workspace root with
  workspace-relative members, made and unpacked in the sandbox, moved through the host in
  chunks. A tar to hydrate is checked on the host first (no absolute paths, no ``..``, no hard
  links or devices, nothing under a symlink, at most :data:`HYDRATE_MEMBERS` members).
- **Shutdown** destroys the sandbox; again is harmless. ``running()`` asks the platform.
- **PTY.** ``pty_exec_start`` keeps the process in the sandbox (``lizard_core.process_table``,
  under a terminal when ``tty=True``); each start and each ``pty_write_stdin`` is one request that
  returns the output of its ``yield_time_s``. The SDK's shell tool then offers ``write_stdin``.
  At most the SDK's ``PTY_PROCESSES_MAX`` are kept, the least recently used ended past it (as
  the SDK's E2B client does); ``stop()`` / ``shutdown()`` end them all, best effort as in the
  SDK's own backends: one that could not be ended is logged and stays kept for the next
  ``pty_terminate_all()``, and the stop or shutdown goes on (a shutdown ends it with the sandbox).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlencode

from agents.sandbox.errors import (
    ExposedPortUnavailableError,
    InvalidManifestPathError,
    PtySessionNotFoundError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceStopError,
)
from agents.sandbox.session import pty_types
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    clamp_pty_yield_time_ms,
    resolve_pty_write_yield_time_ms,
    truncate_text_by_tokens,
)
from agents.sandbox.session.runtime_helpers import RESOLVE_WORKSPACE_PATH_HELPER
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
from agents.sandbox.workspace_paths import coerce_posix_path

from lizard_core import errors as core
from lizard_core.archives import MAX_MEMBERS
from lizard_core.commands import CommandResult, arun_command
from lizard_core.interactive import Update
from lizard_core.ports import aexpose_port
from lizard_core.process_table import ProcessTable
from lizard_core.resolved_files import (
    PathRefusedError,
    Resolver,
    aread_resolved,
    aresolve,
    awrite_resolved,
)
from lizard_core.saved_workspaces import (
    areplace_from_snapshot,
    arestore_workspace,
    asave_workspace,
)
from lizard_core.session import Session

from ._errors import exec_errors, failure_context, workspace_errors
from ._options import LizardSandboxSessionState

__all__ = ["HYDRATE_MEMBERS", "LizardSandboxSession"]

_log = logging.getLogger(__name__)

HYDRATE_MEMBERS = MAX_MEMBERS
"""Most members a tar to hydrate may hold: one with more is refused, its headers read no further
(the host keeps no header, only the names of symlinks)."""
# The SDK's resolver's exit codes: the path escapes every root, a grant resolves to "/", the
# path is under a read-only grant.
_ESCAPED, _ROOT_GRANT, _READ_ONLY = 111, 113, 114


@dataclass(frozen=True, repr=False)
class _Endpoint(ExposedPortEndpoint):
    """The SDK's endpoint, whose ``query`` carries the port's token: kept out of its repr."""

    def __repr__(self) -> str:
        return f"ExposedPortEndpoint(host={self.host!r}, port={self.port}, tls={self.tls})"


def _user_name(user: str | User | None) -> str | None:
    return user.name if isinstance(user, User) else user


class LizardSandboxSession(BaseSandboxSession):
    """A sandbox session on one Lizard sandbox (see the module docstring)."""

    state: LizardSandboxSessionState

    def __init__(self, *, state: LizardSandboxSessionState, session: Session) -> None:
        self.state = state
        self._session = session
        self._ptys = ProcessTable(
            limit=pty_types.PTY_PROCESSES_MAX,
            protected_recent=pty_types.PTY_PROCESSES_PROTECTED_RECENT,
            first_id=pty_types.PTY_PROCESS_ID_MIN,
        )
        self._paused_on_exit = False
        self._restored_from: str | None = None  # the snapshot this sandbox was started from

    @property
    def sandbox_id(self) -> str:
        """The Lizard sandbox's id."""
        return self.state.sandbox_id

    # ── the SDK's hooks ──────────────────────────────────────────────────

    async def _validate_path_access(self, path: Path | str, *, for_write: bool = False) -> Path:
        target, resolver = self._resolver(path, "1" if for_write else "0")
        with self._path_errors(path, target, write=for_write):
            await aresolve(self._session, resolver)
        return target

    async def _reapply_ephemeral_manifest_on_resume(self) -> None:
        # A live sandbox reattached with its root in place: with no ephemeral entries to
        # rebuild, the SDK would only `mkdir` the root (two requests) before the first command.
        if self._can_reuse_preserved_workspace_on_resume() and not (
            self.state.manifest.ephemeral_entry_paths(depth=None)
        ):
            return
        await super()._reapply_ephemeral_manifest_on_resume()

    async def _shutdown_backend(self) -> None:
        if self._paused_on_exit:
            return
        try:
            if self.state.pause_on_exit:
                # Left paused for resume(state); destroyed if the pause fails (never billing).
                await self._session.akeep_paused()
                self._paused_on_exit = True
            else:
                await self._session.adestroy()
        except core.LizardIntegrationError as error:
            root = self._workspace_root_path()
            raise WorkspaceStopError(path=root, context=failure_context(error)) from error

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        try:
            exposed = await aexpose_port(self._session, port)
            host, public_port, tls = exposed.origin
        except (core.LizardIntegrationError, ValueError) as error:
            context = {"backend": "lizard", "detail": type(error).__name__}
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context=context,
                cause=error,
            ) from error
        query = urlencode({"lizard_token": exposed.token})
        return _Endpoint(host=host, port=public_port, tls=tls, query=query)

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
        with exec_errors(argv, timeout):
            result: CommandResult = await arun_command(
                self._session,
                argv,
                cwd=self.state.manifest.root,
                create_cwd=True,
                env=await self._environment(),
                timeout=timeout,
                user=user,
            )
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

    # ── PTY: an interactive process kept in the sandbox ──────────────────

    def supports_pty(self) -> bool:
        return True

    def _pty_update(
        self, process_id: int | None, update: Update, max_output_tokens: int | None
    ) -> PtyExecUpdate:
        text, original = truncate_text_by_tokens(
            update.output.decode("utf-8", errors="replace"), max_output_tokens
        )
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
        # The SDK's defaults, as its E2B client has them: 10 s for a start, 250 ms for a write.
        asked = 10.0 if yield_time_s is None else yield_time_s  # 0 is the SDK's minimum, not 10 s
        wait = clamp_pty_yield_time_ms(int(asked * 1000)) / 1000
        with exec_errors(argv, timeout):
            process_id, update = await self._ptys.astart(
                self._session,
                argv,
                cwd=self.state.manifest.root,
                env=await self._environment(),
                user=_user_name(user),
                tty=tty,
                wait=wait,
                timeout=timeout,
            )
        return self._pty_update(process_id, update, max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Feed ``chars`` to a kept process; its output within ``yield_time_s``."""
        if session_id not in self._ptys:
            raise PtySessionNotFoundError(session_id=session_id)
        wait_ms = resolve_pty_write_yield_time_ms(
            yield_time_ms=int((0.25 if yield_time_s is None else yield_time_s) * 1000),
            input_empty=chars == "",
        )
        with exec_errors(["write_stdin"], None):
            update = await self._ptys.afeed(session_id, chars.encode(), wait=wait_ms / 1000)
        return self._pty_update(session_id, update, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        try:
            await self._ptys.aterminate_all()
        except core.LizardIntegrationError as error:
            # Best effort: the SDK runs this before a shutdown, which must still destroy the
            # sandbox (ending the process with it). The process stays kept for the next call.
            _log.warning("could not end every PTY process: %s", error)

    # ── files: the path resolved in the sandbox, in the request that moves the bytes ──

    def _resolver(self, path: Path | str, mode: Literal["0", "1"]) -> tuple[Path, Resolver]:
        policy = self._workspace_path_policy()
        target = Path(self.normalize_path(path, for_write=mode == "1"))
        grants = [
            arg
            for root, read_only in policy.extra_path_grant_rules()
            for arg in (root.as_posix(), "1" if read_only else "0")
        ]
        args = (policy.sandbox_root().as_posix(), target.as_posix(), mode, *grants)
        return target, Resolver(RESOLVE_WORKSPACE_PATH_HELPER.content, args)

    @contextlib.contextmanager
    def _path_errors(self, path: Path | str, target: Path, *, write: bool) -> Iterator[None]:
        """The SDK's errors for a refused path (as its own check raises them), else workspace's."""
        with workspace_errors(target, write=write):
            try:
                yield
            except FileNotFoundError as error:
                if write:
                    raise
                raise WorkspaceReadNotFoundError(path=target, cause=error) from error
            except PathRefusedError as error:
                if error.exit_code == _READ_ONLY and write:
                    context = {"reason": "read_only_extra_path_grant", "path": target.as_posix()}
                    raise WorkspaceArchiveWriteError(path=target, context=context) from error
                if error.exit_code == _ROOT_GRANT:
                    raise ValueError(error.detail) from error
                if error.exit_code != _ESCAPED:
                    raise
                original = coerce_posix_path(path)
                reason: Literal["absolute", "escape_root"] = (
                    "absolute" if original.is_absolute() else "escape_root"
                )
                raise InvalidManifestPathError(
                    rel=original.as_posix(), reason=reason, context={"detail": error.detail}
                ) from error

    async def read(self, path: Path | str, *, user: str | User | None = None) -> io.IOBase:
        """The file's bytes as a stream: one request for a small file, else streamed."""
        target, resolver = self._resolver(path, "0")
        with self._path_errors(path, target, write=False):
            return await aread_resolved(  # an io.IOBase since Python 3.11
                self._session, resolver, user=_user_name(user)
            )

    async def write(
        self, path: Path | str, data: io.IOBase, *, user: str | User | None = None
    ) -> None:
        """Write ``data``: one request for a small file, else streamed in chunks."""
        target, resolver = self._resolver(path, "1")
        with self._path_errors(path, target, write=True):
            await awrite_resolved(self._session, resolver, data, user=_user_name(user))  # type: ignore[arg-type]

    # ── workspace persistence (lizard_core.saved_workspaces) ─────────────

    async def persist_workspace(self) -> io.IOBase:
        """A tar of the workspace root (members relative to it), or a Lizard snapshot's reference.

        With ``workspace_persistence="snapshot"`` the sandbox's files are saved as a Lizard
        snapshot (nothing through the host) and the one this session saved before is deleted.
        A manifest with paths kept out of persistence falls back to the tar, which can skip them.
        """
        root = self._workspace_root_path()
        skipped = [p.as_posix() for p in self._persist_workspace_skip_relpaths()]
        as_snapshot = self.state.workspace_persistence == "snapshot" and not skipped
        with workspace_errors(root, write=False):
            saved, snapshot_id = await asave_workspace(
                self._session,
                root.as_posix(),
                snapshot=as_snapshot,
                label="openai-agents workspace",
                replaces=self.state.snapshot_id,
                exclude=skipped,
            )
        if snapshot_id is not None:
            self.state.snapshot_id = snapshot_id
        return saved  # an io.IOBase since Python 3.11

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """Restore what :meth:`persist_workspace` saved: a snapshot's files, or a tar.

        A tar is checked on the host first, so nothing of a hostile one is extracted.
        """
        root = self._workspace_root_path()
        try:
            with workspace_errors(root, write=True):
                snapshot_id = await arestore_workspace(
                    self._session,
                    root.as_posix(),
                    data,  # type: ignore[arg-type]  # the SDK's io.IOBase: a binary file
                    max_members=HYDRATE_MEMBERS,
                )
                if snapshot_id is not None and snapshot_id != self._restored_from:
                    # Not already started from it by resume(): a sandbox started from it now.
                    new = await areplace_from_snapshot(
                        self._session, snapshot_id, volume=self.state.volume
                    )
                    self._session, self._restored_from = new, snapshot_id
                    self.state.sandbox_id = new.sandbox_id or ""
        except core.UnsafeArchiveError as error:
            context = {"reason": error.reason, "member": error.member}
            raise WorkspaceArchiveWriteError(path=root, context=context, cause=error) from error

    async def _clear_workspace_root_on_resume(self) -> None:
        # A sandbox started from the saved snapshot already holds the workspace to restore.
        if self._restored_from is None:
            await super()._clear_workspace_root_on_resume()

    def __repr__(self) -> str:
        return f"LizardSandboxSession(sandbox_id={self.state.sandbox_id!r})"
