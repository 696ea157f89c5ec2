"""`LizardSandboxBackend`: Pydantic AI's workspace protocol mapped onto `lizard_core`.

What holds (the rules of `pydantic_ai/workspaces/protocol.py`, and how they are kept here):

- Building a backend validates every argument and makes no request. Only creating needs a
  project: with `ref`, `LIZARD_PROJECT_ID` may be unset (as in 0.1.0); without it, a missing
  project is a `ValueError` at construction.
- The first operation creates the sandbox (from `snapshot`, with `volume` mounted, when given), or
  attaches to the one `ref` names, resuming it if paused and renewing a lifetime that is less
  than half the configured one; a sandbox that is gone is `WorkspaceUnavailableError`, never a
  replacement. `lizard_core.session.Session` owns
  this: it creates at most one sandbox however many first operations race, and records its id as
  soon as the create returns, even if the caller was cancelled meanwhile, so `ref` never changes
  once set.
- A run ending never destroys the sandbox: only `destroy()` (or its lifetime) does. `pause()`
  keeps its files and stops its billing; the next operation (or attach) resumes it, booting it
  fresh: background processes started before the pause are gone.
- Each command is one streaming request (`lizard_core.commands`); each file operation is one
  request for small files (`lizard_core.files`). The working directory is created and resolved
  by whichever comes first: the first `run()` (inside its own request, so a first command on a
  new sandbox costs the create plus one request) or `working_dir()` (one request). A non-zero
  exit is a result; a timeout or the output limit raise with the partial output; a guest that
  dies cannot hang a run, because the core backs every command with a host-side deadline.
- Errors are mapped in one place, `_errors.workspace_errors`; path failures are builtin `OSError`s.
- Nothing from the host environment reaches the sandbox: only `env`, `envs` and per-command `env`.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final

import anyio
from pydantic_ai.workspaces import (
    CommandResult,
    FileEntry,
    SupportsCommands,
    SupportsFilesystem,
    SupportsRealpath,
    WorkspaceBackend,
    WorkspaceCommand,
    WorkspaceError,
    WorkspaceRef,
)

from lizard_core import commands
from lizard_core.checks import check_absolute_path, check_env, check_seconds, package_version
from lizard_core.config import SandboxConfig, Size
from lizard_core.files import FileStat, SandboxFiles
from lizard_core.session import Session

from ._errors import decode_output, workspace_errors

__all__ = [
    "DEFAULT_LIFETIME_MS",
    "DEFAULT_SIZE",
    "DEFAULT_TEMPLATE",
    "DEFAULT_WORKING_DIR",
    "OUTPUT_LIMIT",
    "PROVIDER",
    "LizardSandboxBackend",
    "check_ref",
]

PROVIDER: Final = "lizard"
"""`WorkspaceRef.provider` of every Lizard workspace."""

# The 0.1.0 defaults, kept: users rely on the interpreter template and an hour of life.
DEFAULT_TEMPLATE: Final = "interpreter"
DEFAULT_SIZE: Final[Size] = "small"
DEFAULT_LIFETIME_MS: Final = 3_600_000
DEFAULT_WORKING_DIR: Final = "/workspace"

OUTPUT_LIMIT: Final = 10 * 1024 * 1024
"""Bytes each output stream of a command may produce before `WorkspaceOutputLimitError`."""

_INTEGRATION: Final = "pydantic-ai"  # the metadata tag 0.1.0 put on its sandboxes

# A short bounded command: a sandbox that cannot create a directory in this time is not usable.
_PREPARE_TIMEOUT: Final = 60.0
# Does nothing: `working_dir()` runs it only for the directory the core creates and resolves.
_NOOP: Final = ("/bin/sh", "-c", ":")


def check_ref(ref: object) -> WorkspaceRef:
    """Return `ref` if it names a Lizard sandbox; `TypeError`/`ValueError` otherwise."""
    if not isinstance(ref, WorkspaceRef):
        raise TypeError(f"ref must be a WorkspaceRef, not {type(ref).__name__}")
    if ref.provider != PROVIDER:
        raise ValueError(f"unsupported workspace provider {ref.provider!r}; expected {PROVIDER!r}")
    return ref  # the id itself is checked by lizard_core's Session


# Checked here, before the workspace is touched, with lizard_core's checks; only the timeout is
# reworded to the workspace protocol's type (a timeout that is not a number is a ValueError).
_check_env = check_env
_check_path = check_absolute_path


def _argv(command: object, shell: bool) -> list[str]:
    """The argv that runs `command`: a string only with `shell=True` (under `/bin/sh -c`)."""
    if isinstance(command, str) != shell or isinstance(command, bytes | bytearray):
        raise TypeError("pass a string with shell=True, or an argv sequence without it")
    if isinstance(command, str):
        argv: list[object] = ["/bin/sh", "-c", command]
    elif isinstance(command, Sequence):
        argv = list(command)
    else:
        raise TypeError(f"command must be a str or an argv sequence, not {type(command).__name__}")
    if not argv:
        raise ValueError("command must not be empty")
    checked = [argument for argument in argv if type(argument) is str]
    if len(checked) != len(argv):
        raise TypeError("argv elements must be strings")
    if any("\0" in argument for argument in checked):
        raise ValueError("command arguments must not contain NUL")
    return checked


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None:
        try:
            check_seconds(timeout)
        except TypeError as exc:
            raise ValueError(str(exc)) from None


class LizardSandboxBackend(
    WorkspaceBackend, SupportsCommands, SupportsFilesystem, SupportsRealpath
):
    """A [Lizard](https://lizard.build) sandbox as a Pydantic AI workspace backend.

    Implements `WorkspaceBackend`, `SupportsCommands`, `SupportsFilesystem` and `SupportsRealpath`.
    Commands and files live in a Firecracker microVM; nothing runs on the host. Building one makes
    no request; the first operation creates a sandbox (or attaches to `ref`). Save `ref` after first
    use to reconnect later; call `destroy()` when done: an agent run never destroys its workspace.

    Args:
        ref: A sandbox to attach to on first use, instead of creating one; a paused one is
            resumed. A sandbox that is gone raises `WorkspaceUnavailableError`; no replacement
            is created.
        project_id: Lizard project id, name or slug; `LIZARD_PROJECT_ID` when `None`. Needed
            only to create a sandbox: not with `ref`.
        api_key: Lizard API key; `LIZARD_API_KEY` when `None`. It stays on the host.
        size: Machine size of a new sandbox.
        lifetime_ms: Lifetime of a new sandbox; when it runs out, the sandbox and its files go.
        working_dir: Absolute directory commands start in and relative paths resolve against;
            created on first use if missing, and reported with symlinks resolved.
        env: Variables every command gets (on an attached sandbox too); a command's own `env` wins.
        api_url: Lizard API URL; `LIZARD_API_URL`, else the cloud. HTTPS except on loopback.
        template: Template of a new sandbox, e.g. `interpreter` or `base`.
        region: Region of a new sandbox; Lizard's default when `None`.
        envs: Variables set on a new sandbox itself, visible to every process in it.
        internet_access: Whether a new sandbox may reach the internet.
        keep_alive: Extend the sandbox's lifetime while this backend is in use (on by
            default; an idle sandbox still expires).
        snapshot: A snapshot id (`lizard_core.snapshots.take_snapshot`) a new sandbox starts
            from, with its files; not with `ref`.
        volume: A project volume's name, mounted at `/workspace` of a new sandbox (made if
            absent); its files outlive the sandbox. Not with `ref`.
        idle_pause_s: Pause the sandbox after this many idle seconds; the next operation
            resumes it.
    """

    def __init__(
        self,
        *,
        ref: WorkspaceRef | None = None,
        project_id: str | None = None,
        api_key: str | None = None,
        size: Size = DEFAULT_SIZE,
        lifetime_ms: int = DEFAULT_LIFETIME_MS,
        working_dir: str = DEFAULT_WORKING_DIR,
        env: Mapping[str, str] | None = None,
        api_url: str | None = None,
        template: str = DEFAULT_TEMPLATE,
        region: str | None = None,
        envs: Mapping[str, str] | None = None,
        internet_access: bool = True,
        keep_alive: bool = True,
        snapshot: str | None = None,
        volume: str | None = None,
        idle_pause_s: float | None = None,
    ) -> None:
        if ref is not None:
            check_ref(ref)
            if snapshot is not None or volume is not None:
                raise ValueError("snapshot and volume are for a new sandbox: not with ref")
        self._configured_working_dir = _check_path(working_dir)
        self._env = _check_env(env)
        config = SandboxConfig.from_env(
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=size,
            lifetime_ms=lifetime_ms,
            region=region,
            envs=envs,
            internet_access=internet_access,
            integration=_INTEGRATION,
            integration_version=package_version("pydantic-ai-lizard"),
        )
        self._session = Session(
            config,
            sandbox_id=None if ref is None else ref.id,
            keep_alive=keep_alive,
            snapshot_id=snapshot,
            volume=volume,
            idle_pause_s=idle_pause_s,
        )
        # Until the working directory is known, `remove` is never called (it needs it first).
        self._files = SandboxFiles(self._session)
        self._working_dir: str | None = None
        self._prepare_lock = anyio.Lock()
        self._ref = ref
        self._used = False  # an operation reached the sandbox (for the capability's pause)

    def __repr__(self) -> str:
        return f"LizardSandboxBackend(ref={self.ref!r})"

    @property
    def ref(self) -> WorkspaceRef | None:
        """The sandbox's identity: `None` until one is created, then fixed for good."""
        if self._ref is None and (sandbox_id := self._session.sandbox_id) is not None:
            self._ref = WorkspaceRef(provider=PROVIDER, id=sandbox_id)
        return self._ref

    def _errors(self, *, output_limit: int = 0) -> AbstractAsyncContextManager[None]:
        self._used = True
        return workspace_errors(self._session, output_limit=output_limit)

    async def destroy(self) -> None:
        """Destroy the sandbox, if one was created or named. Idempotent; final for this backend."""
        async with self._errors():
            await self._session.adestroy()

    async def pause(self) -> None:
        """Pause the sandbox: its files stay, its processes end, its compute stops billing.

        Nothing to do before the sandbox exists. The next operation, or a later attach by `ref`,
        resumes it.
        """
        if self._session.sandbox_id is None:
            return
        async with self._errors():
            await self._session.apause()

    async def _pause_if_used(self) -> None:
        """Pause at a run's end, only if the run reached the sandbox (else nothing to stop)."""
        if self._used and not self._session.destroyed:
            await self.pause()

    async def working_dir(self) -> str:
        """The directory commands start in: absolute, symlinks resolved, created on first use."""
        if self._working_dir is None:
            async with self._prepare_lock:
                if self._working_dir is None:
                    # One request creates the directory and reports where it really is.
                    result = await self._run_in_working_dir(
                        list(_NOOP), env={}, timeout=_PREPARE_TIMEOUT
                    )
                    if result.exit_code != 0:
                        reason = decode_output(result.stderr).strip()
                        raise WorkspaceError(
                            f"Could not prepare the working directory "
                            f"{self._configured_working_dir!r} in the Lizard sandbox: "
                            f"{reason or f'exit code {result.exit_code}'}"
                        )
        assert self._working_dir is not None  # set by _run_in_working_dir
        return self._working_dir

    async def _run_in_working_dir(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        timeout: float | None,  # noqa: ASYNC109 - the command's own limit, enforced in the guest
    ) -> commands.CommandResult:
        """Run `argv` in the working directory; the first call also creates and resolves it.

        Until the working directory is known, the command carries `create_cwd`: the guest makes
        the directory and reports its resolved path in the same request, so nothing is spent on
        preparing it.
        """
        known = self._working_dir
        async with self._errors(output_limit=OUTPUT_LIMIT):
            try:
                result = await commands.arun_command(
                    self._session,
                    argv,
                    cwd=known or self._configured_working_dir,
                    create_cwd=known is None,
                    env=env,
                    timeout=timeout,
                    output_limit=OUTPUT_LIMIT,
                )
            except OSError as error:
                if known is not None or error.errno == errno.E2BIG:
                    # The directory was removed since, or the command is too long to start
                    # (the harness asks the model for a shorter one): the builtin error says so.
                    raise
                raise WorkspaceError(
                    f"Could not create the working directory {self._configured_working_dir!r} "
                    f"in the Lizard sandbox: {error.strerror or error}"
                ) from error
        if self._working_dir is None and result.cwd is not None:
            # Protected from `remove()` from here on.
            self._files = SandboxFiles(self._session, protected=(result.cwd,))
            self._working_dir = result.cwd
        return result

    async def run(
        self,
        command: WorkspaceCommand,
        *,
        shell: bool = False,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the protocol's signature
    ) -> CommandResult:
        """Run a command in `working_dir()` with stdin at EOF and return its complete output."""
        argv = _argv(command, shell)
        _check_timeout(timeout)
        merged_env = {**self._env, **_check_env(env)}
        result = await self._run_in_working_dir(argv, env=merged_env, timeout=timeout)
        return CommandResult(
            exit_code=result.exit_code,
            stdout=decode_output(result.stdout),
            stderr=decode_output(result.stderr),
        )

    async def read_bytes(self, path: str) -> bytes:
        """Read a file's contents."""
        async with self._errors():
            return await self._files.aread_bytes(path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write a file, creating missing parents and writing through an existing symlink."""
        async with self._errors():
            await self._files.awrite_bytes(path, data)

    async def stat(self, path: str) -> FileEntry:
        """Metadata of a file or directory, following symlinks."""
        async with self._errors():
            entry = await self._files.astat(path)
        return _file_entry(entry)

    async def list_dir(self, path: str) -> Sequence[FileEntry]:
        """The entries of a directory, sorted by name, not recursive."""
        async with self._errors():
            entries = await self._files.alist_dir(path)
        return tuple(_file_entry(entry) for entry in entries)

    async def make_dir(self, path: str) -> None:
        """Create a directory and its missing parents; an existing directory is fine."""
        async with self._errors():
            await self._files.amake_dir(path)

    async def remove(self, path: str) -> None:
        """Remove a file, a symlink (not its target), or a directory tree.

        Refuses `/`, the working directory and its ancestors with `ValueError`, also when `path`
        reaches one of them through a symlink.
        """
        _check_path(path)
        await self.working_dir()  # protects it from here on
        async with self._errors():
            await self._files.aremove(path)

    async def exists(self, path: str) -> bool:
        """Whether a file or directory exists at `path` (a dangling symlink does not)."""
        async with self._errors():
            return await self._files.aexists(path)

    async def realpath(self, path: str) -> str:
        """`path` with every symlink resolved inside the sandbox, like `os.path.realpath`."""
        async with self._errors():
            return await self._files.arealpath(path)


def _file_entry(entry: FileStat) -> FileEntry:
    return FileEntry(name=entry.name, path=entry.path, is_dir=entry.is_dir, size=entry.size)
