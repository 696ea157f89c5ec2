"""``LizardSandbox``: a Deep Agents ``BaseSandbox`` backend on ``lizard_core``.

``BaseSandbox`` derives ``ls``, ``read``, ``write``, ``edit``, ``grep`` and ``glob`` from
``execute`` and the file transfers, which this class provides. Contract (proven against
lizard-local in ``tests/``, LangChain's standard sandbox suite included):

- **No I/O until first use.** Building checks every argument (``TypeError`` / ``ValueError``)
  and makes no request; the first operation creates the sandbox or attaches to the one given.
- **Ownership.** :meth:`close` (and leaving ``with``) destroys a sandbox this backend created and
  leaves one it attached to (``sandbox_id=``, or a ``lizard.Sandbox`` as in 0.1.0) as it is;
  :meth:`kill` destroys either.
- **Across runs.** :meth:`pause` stops a sandbox's billing for compute (files stay, processes
  end) and the next operation, or :meth:`resume`, boots it again; ``close(keep=True)`` pauses and
  leaves it for a later run, which attaches by ``sandbox_id=`` (a paused sandbox is resumed, its
  lifetime renewed); if that pause fails, the sandbox is destroyed, never left running.
  ``snapshot_id=`` creates the sandbox from a snapshot's files; ``volume=`` mounts a named volume
  (made if absent) at ``/workspace``; ``idle_pause_s=`` pauses it when idle. A gone sandbox is
  ``SandboxUnavailableError``, never replaced.
- **Commands**, one request each, run under ``/bin/sh`` with stderr joined to stdout, so the
  output keeps the order it was written in; a non-zero exit is a result. A timeout (default
  30 minutes) returns the partial output with exit code 124; passing ``output_limit`` stops the
  command and returns the head and tail of what was kept around a marker
  (:func:`lizard_core.truncation.head_and_tail`), a note and ``truncated=True``. Output is never
  cut silently. Deep Agents' capture offload (``enable_capture_offload``) is on: under its
  middleware a large output is saved to a file in the sandbox and the model gets a preview
  and the exit code.
- **Lifetime.** A created sandbox lives ``lifetime_ms`` (default 30 minutes) from its last
  use: keep-alive is on by default, so a long agent session keeps it and an idle one expires.
- **Files.** One result per path, in input order: ``invalid_path`` for a relative path (no
  request), ``file_not_found``, ``is_directory``, ``permission_denied``; exact bytes; parents
  created; one request per small file. Gone sandboxes, rejected credentials and exhausted quotas
  are raised, never returned per file.
- **Cost.** ``ls``, ``read``, ``write`` (deepagents 0.7), ``grep``, ``glob`` and ``edit`` (up to
  Deep Agents' 50 KB inline edit) are one request each.
- **Async** methods run on ``lizard_core``'s async face (the blocking SDK in a worker thread per
  call, awaited to its end); cancelling ``aexecute`` stops the command's process group.
- **Credentials** stay on the host: nothing from its environment enters the sandbox but ``envs``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Final

from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox

from lizard_core.checks import package_version
from lizard_core.closing import ClosesOnExit
from lizard_core.commands import DEFAULT_OUTPUT_LIMIT, UNTIMED_EXEC_S, arun_command, run_command
from lizard_core.config import SandboxConfig, Size
from lizard_core.errors import CommandTimeoutError, OutputLimitError
from lizard_core.files import SandboxFiles
from lizard_core.sdk_sandbox import session_for_sdk_sandbox
from lizard_core.session import Session
from lizard_core.transfers import aread_each, awrite_each, read_each, write_each
from lizard_core.truncation import head_and_tail, stopped_note

from ._errors import file_error, sandbox_errors

__all__ = ["DEFAULT_LIFETIME_MS", "DEFAULT_TEMPLATE", "DEFAULT_TIMEOUT", "LizardSandbox"]

DEFAULT_TEMPLATE: Final = "interpreter"
"""The template 0.1.0's examples used: Python 3 and the data stack."""
DEFAULT_TIMEOUT: Final = 1800
"""Seconds a command may run unless ``execute`` is given a timeout: 30 minutes, as the other
adapters and Deep Agents' peers (0.1.0 had 60 s, too short for a build or a test suite)."""
DEFAULT_LIFETIME_MS: Final = 1_800_000
"""Lifetime of a created sandbox, from its last use (keep-alive is on): 30 minutes."""
TIMEOUT_EXIT_CODE: Final = 124
"""The exit code of a command stopped at its timeout (as ``timeout(1)`` reports it)."""
INTEGRATION: Final = "langchain"
"""The integration's name in the metadata of every sandbox it creates."""

WRITE_REPLACES: Final = tuple(
    int(part) for part in metadata.version("deepagents").split(".")[:2]
) >= (0, 7)
"""Deep Agents 0.7 made ``write`` create or replace a file; 0.6 refuses an existing one, in a
command of its own that is kept there (``write`` then costs two requests)."""

# stderr joined to stdout before the command is parsed, so that even its syntax errors keep
# their place; "$1" is the command, passed as an argument rather than spliced into the script.
_JOINED: Final = ("/bin/sh", "-c", 'exec 2>&1; exec /bin/sh -c "$1"', "sh")


def _check_timeout(timeout: object) -> float | None:
    """Seconds, or None for no limit but the platform's (``0``, as Deep Agents allows)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not math.isfinite(timeout) or not 0 <= timeout <= UNTIMED_EXEC_S:
        raise ValueError(f"timeout must be between 0 and {UNTIMED_EXEC_S:g} seconds: {timeout!r}")
    return None if timeout == 0 else float(timeout)


def _check_keep(keep: object) -> bool:
    if type(keep) is not bool:
        raise TypeError("keep must be a bool")
    return keep


def _check_command(command: object) -> list[str]:
    if not isinstance(command, str):
        raise TypeError(f"command must be a str, not {type(command).__name__}")
    if "\0" in command:
        raise ValueError("command must not contain NUL characters")
    return [*_JOINED, command]


class LizardSandbox(BaseSandbox, ClosesOnExit):
    """A Deep Agents sandbox backend that runs commands and files in a Lizard sandbox.

    ``LizardSandbox()`` creates one on first use, ``LizardSandbox(sandbox_id=...)`` attaches to a
    running one, ``LizardSandbox(sandbox)`` wraps a ``lizard.Sandbox`` (0.1.0's form).

    Args:
        sandbox: A ``lizard.Sandbox`` to use; the caller keeps owning it.
        timeout: Default seconds a command may run (0: only the platform's limit).
        sandbox_id: Id of a running sandbox to attach to; :meth:`close` leaves it running.
        api_key: Lizard API key (else ``LIZARD_API_KEY``); it stays on the host.
        api_url: Lizard API URL (else ``LIZARD_API_URL``, else the cloud).
        project_id: Lizard project id, slug or name (else ``LIZARD_PROJECT_ID``).
        template: Template of a created sandbox (default ``interpreter``).
        size: Machine size of a created sandbox (default: the platform's).
        lifetime_ms: Lifetime of a created sandbox (default 30 minutes, from its last use).
        envs: Environment variables of a created sandbox; nothing is copied from the host.
        metadata: Labels recorded on a created sandbox.
        internet_access: False creates the sandbox without internet.
        allowed_hosts: With no internet, the hosts that stay reachable.
        keep_alive: Extend the sandbox's lifetime while it is used (default True).
        output_limit: Bytes of output a command may produce before it is stopped.
        snapshot_id: Create the sandbox from this snapshot (its files).
        volume: Mount this volume (by name; made if absent) at ``/workspace`` of a created
            sandbox; its files outlive the sandbox.
        idle_pause_s: Pause the sandbox after this many idle seconds; the next operation
            resumes it.
    """

    enable_capture_offload = True
    """Deep Agents (where it has the option) saves a large output to a file in the sandbox and
    gives the model a preview and the exit code; the sandbox has the shell and coreutils its
    wrapper needs."""

    def __init__(
        self,
        sandbox: Any = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        sandbox_id: str | None = None,
        api_key: str | None = None,
        api_url: str | None = None,
        project_id: str | None = None,
        template: str | None = None,
        size: Size | None = None,
        lifetime_ms: int | None = None,
        envs: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        internet_access: bool | None = None,
        allowed_hosts: Sequence[str] | None = None,
        keep_alive: bool = True,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        snapshot_id: str | None = None,
        volume: str | None = None,
        idle_pause_s: float | None = None,
    ) -> None:
        self._timeout = _check_timeout(timeout)
        if isinstance(output_limit, bool) or not isinstance(output_limit, int):
            raise TypeError("output_limit must be an int")
        if output_limit <= 0:
            raise ValueError("output_limit must be positive")
        self._output_limit = output_limit
        creation: dict[str, Any] = {
            "template": template,
            "size": size,
            "lifetime_ms": lifetime_ms,
            "envs": envs,
            "metadata": metadata,
            "internet_access": internet_access,
            "allowed_hosts": allowed_hosts,
        }
        sessions: dict[str, Any] = {"snapshot_id": snapshot_id, "volume": volume}
        given = sorted(n for n, v in {**creation, **sessions}.items() if v is not None)
        if sandbox is not None or sandbox_id is not None:
            if given:
                raise ValueError(f"{', '.join(given)} apply only to a sandbox this backend creates")
            if sandbox is not None and sandbox_id is not None:
                raise ValueError("pass a lizard.Sandbox or a sandbox_id, not both")
        if sandbox is not None:
            if api_key is not None or api_url is not None or project_id is not None:
                raise ValueError("a lizard.Sandbox brings its own api_key and api_url")
            if idle_pause_s is not None:
                raise ValueError("idle_pause_s needs a sandbox_id or a created sandbox")
            self._session = session_for_sdk_sandbox(
                sandbox,
                keep_alive=keep_alive,
                integration=INTEGRATION,
                integration_version=package_version("langchain-lizard"),
            )
        else:
            creation["template"] = DEFAULT_TEMPLATE if template is None else template
            if lifetime_ms is None:
                creation["lifetime_ms"] = DEFAULT_LIFETIME_MS
            config = SandboxConfig.from_env(
                api_key=api_key,
                api_url=api_url,
                project_id=project_id,
                integration=INTEGRATION,
                integration_version=package_version("langchain-lizard"),
                **{name: value for name, value in creation.items() if value is not None},
            )
            self._session = Session(
                config,
                sandbox_id=sandbox_id,
                keep_alive=keep_alive,
                idle_pause_s=idle_pause_s,
                **sessions,
            )
        self._files = SandboxFiles(self._session)

    # ── identity and lifetime ────────────────────────────────────────────

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it was created or attached to (no request), else None."""
        return self._session.sandbox_id

    @property
    def id(self) -> str:
        """The sandbox's id; creates (or attaches to) the sandbox if no operation has yet."""
        known = self._session.sandbox_id
        if known is not None:
            return known
        with sandbox_errors():
            return str(self._session.sandbox().sandbox_id)

    def __repr__(self) -> str:
        return f"LizardSandbox(sandbox_id={self.sandbox_id!r})"

    def close(self, *, keep: bool = False) -> None:
        """Stop using the sandbox: destroy it if this backend created it; idempotent.

        ``keep=True`` pauses it instead (either kind) for a later run to attach to by
        :attr:`sandbox_id`; a sandbox already gone counts as done. If the pause fails, the
        sandbox is destroyed rather than left running (billing) and the pause's error is raised.
        """
        with sandbox_errors():
            if _check_keep(keep):
                self._session.keep_paused()
            else:
                # Waits for a create in flight (a racing first call's), so it is not left running.
                self._session.release()

    async def aclose(self, *, keep: bool = False) -> None:
        """Async :meth:`close`."""
        with sandbox_errors():
            if _check_keep(keep):
                await self._session.akeep_paused()
            else:
                await self._session.arelease()

    def pause(self) -> None:
        """Pause the sandbox: files stay, processes end, compute billing stops (blocking).

        The next operation resumes it (a fresh boot); no request if there is no sandbox yet.
        """
        with sandbox_errors():
            self._session.pause()

    async def apause(self) -> None:
        """Async :meth:`pause`."""
        with sandbox_errors():
            await self._session.apause()

    def resume(self) -> None:
        """Resume the sandbox this backend paused (blocking); it boots fresh with its files."""
        with sandbox_errors():
            self._session.resume()

    async def aresume(self) -> None:
        """Async :meth:`resume`."""
        with sandbox_errors():
            await self._session.aresume()

    @property
    def paused(self) -> bool:
        """True while this backend holds its sandbox paused (no request)."""
        return self._session.paused

    def kill(self) -> None:
        """Destroy the sandbox, whoever created it; idempotent. A gone one counts as done."""
        with sandbox_errors():
            self._session.destroy()

    async def akill(self) -> None:
        """Async :meth:`kill`."""
        with sandbox_errors():
            await self._session.adestroy()

    # ── commands ─────────────────────────────────────────────────────────

    def _limit(self, timeout: float | None) -> float | None:
        return self._timeout if timeout is None else _check_timeout(timeout)

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run ``command`` with ``/bin/sh -c``; ``timeout`` overrides the backend's default."""
        argv, limit = _check_command(command), self._limit(timeout)
        with sandbox_errors():
            try:
                result = run_command(
                    self._session, argv, timeout=limit, output_limit=self._output_limit
                )
            except (CommandTimeoutError, OutputLimitError) as stopped:
                return _stopped(stopped)
        return ExecuteResponse(_text(result.stdout + result.stderr), result.exit_code)

    async def aexecute(
        self,
        command: str,
        *,
        timeout: int | None = None,  # noqa: ASYNC109 - the command's limit, enforced in the guest
    ) -> ExecuteResponse:
        """Async :meth:`execute`; cancelling the task stops the command's process group."""
        argv, limit = _check_command(command), self._limit(timeout)
        with sandbox_errors():
            try:
                result = await arun_command(
                    self._session, argv, timeout=limit, output_limit=self._output_limit
                )
            except (CommandTimeoutError, OutputLimitError) as stopped:
                return _stopped(stopped)
        return ExecuteResponse(_text(result.stdout + result.stderr), result.exit_code)

    # ── files ────────────────────────────────────────────────────────────

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each ``(path, bytes)`` (parents created); one result per file, in order."""
        with sandbox_errors():
            done = write_each(self._files, files)
        return [FileUploadResponse(path=t.path, error=_code(t.error)) for t in done]

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Async :meth:`upload_files`."""
        with sandbox_errors():
            done = await awrite_each(self._files, files)
        return [FileUploadResponse(path=t.path, error=_code(t.error)) for t in done]

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read each path's exact bytes; one result per path, in order."""
        with sandbox_errors():
            done = read_each(self._files, paths)
        return [FileDownloadResponse(t.path, t.data, _code(t.error)) for t in done]

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Async :meth:`download_files`."""
        with sandbox_errors():
            done = await aread_each(self._files, paths)
        return [FileDownloadResponse(t.path, t.data, _code(t.error)) for t in done]

    # ── one request where BaseSandbox spends two ─────────────────────────

    if WRITE_REPLACES:

        def write(self, file_path: str, content: str) -> WriteResult:
            """Create or replace ``file_path`` with ``content`` (parents created): one request.

            ``BaseSandbox`` runs a command to create the parents first; the upload does that.
            """
            [response] = self.upload_files([(file_path, content.encode("utf-8"))])
            return _written(file_path, response)

        async def awrite(self, file_path: str, content: str) -> WriteResult:
            """Async :meth:`write`."""
            [response] = await self.aupload_files([(file_path, content.encode("utf-8"))])
            return _written(file_path, response)


def _text(data: bytes) -> str:
    """A command's output for the model: invalid UTF-8 becomes U+FFFD, never dropped."""
    return data.decode("utf-8", errors="replace")


def _code(error: OSError | None) -> str | None:
    return None if error is None else file_error(error)


def _written(path: str, response: FileUploadResponse) -> WriteResult:
    if response.error:
        return WriteResult(error=f"Failed to write file '{path}': {response.error}")
    return WriteResult(path=path)


def _stopped(error: CommandTimeoutError | OutputLimitError) -> ExecuteResponse:
    """A command stopped at its timeout or output limit, as a result with its partial output."""
    output = _text(error.stdout + error.stderr)
    if isinstance(error, CommandTimeoutError):
        note = f"Error: Command timed out after {error.timeout:g} seconds and was stopped."
        return ExecuteResponse(
            output=f"{output}\n{note}" if output else note, exit_code=TIMEOUT_EXIT_CODE
        )
    # The head and tail of what was kept: the model sees how it started and where it stopped.
    return ExecuteResponse(
        output=f"{head_and_tail(output)}\n{stopped_note(error.limit)}",
        exit_code=None,
        truncated=True,
    )
