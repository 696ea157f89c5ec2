"""``LizardEnvironment``: an ADK ``BaseEnvironment`` in one Lizard sandbox, on ``lizard_core``.

What it maps (proven against lizard-local in ``tests/test_environment.py``, which also checks the
behaviours of ADK's own ``LocalEnvironment`` tests against this class):

- **Lifecycle.** Building it validates every option and makes no request. ``initialize()``
  creates the sandbox (one ``POST``), or attaches to ``sandbox_id`` (one ``GET``); it is
  idempotent. ``close()`` destroys a sandbox it created and leaves an attached one running; it
  is idempotent, and ``initialize()`` afterwards starts over. Use before ``initialize()`` or
  after ``close()`` is a ``RuntimeError``, as in ADK's own environments. A sandbox that expired
  or was killed raises ``lizard_core``'s ``SandboxGoneError`` and is never silently replaced
  (ADK's E2B environment would recreate it with its files lost); ``keep_alive`` (on by default)
  extends the lifetime while the environment is in use.
- **Commands.** ``execute`` runs ``/bin/sh -c`` in ``working_dir`` (created if missing), one
  request each. A non-zero exit is a result; ``timeout`` seconds (None: the platform's one-hour
  limit for a command) stop the command's process group and return the output so far with
  ``timed_out`` and exit code -1, as ADK's E2B environment does. Output is decoded as UTF-8 with
  invalid bytes replaced; past ``output_limit`` bytes per stream ``OutputLimitError`` is
  raised (ADK's tools show the model its message), never a silently cut result. Cancelling the
  task stops the command.
- **Files.** Byte-exact, any size, binary-safe. A relative path is taken from ``working_dir``;
  an absolute one may be anywhere in the sandbox, as with ADK's E2B and Daytona environments
  (the sandbox is the boundary, not the folder). ``write_file`` creates parents; text is written
  as UTF-8 (text that cannot be encoded, or content that is neither str nor bytes, is refused
  before any request, so an existing file stays as it was). A missing file raises the builtin
  ``FileNotFoundError``, like ADK's local environment; other builtin ``OSError`` kinds likewise.
- **Errors.** Everything else is a ``lizard_core.errors.LizardIntegrationError`` kind, with no
  key in its text: ADK has no error types of its own for environments.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Final

from google.adk.environment import BaseEnvironment, ExecutionResult
from typing_extensions import override

from lizard_core.commands import DEFAULT_OUTPUT_LIMIT, arun_command
from lizard_core.config import Size
from lizard_core.errors import CommandTimeoutError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session

from ._sandbox import check_dir, make_session

__all__ = ["DEFAULT_WORKING_DIR", "LizardEnvironment"]

DEFAULT_WORKING_DIR: Final = "/home/user"
"""The sandbox user's home: where commands start and relative paths point."""
TIMED_OUT_EXIT_CODE: Final = -1


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class LizardEnvironment(BaseEnvironment):
    """A Lizard sandbox as an ADK environment: ``EnvironmentToolset(environment=...)``.

    Args:
        api_key: Lizard API key; ``LIZARD_API_KEY`` when None. It stays on the host.
        api_url: Lizard API URL; ``LIZARD_API_URL``, else the cloud. HTTPS except on loopback.
        project_id: Lizard project id, slug or name; ``LIZARD_PROJECT_ID`` when None.
        template: The sandbox's template, e.g. ``base`` or ``interpreter``.
        size: Machine size, or None for the platform's default.
        lifetime_ms: The sandbox's lifetime (extended while in use when ``keep_alive``).
        env_vars: Environment variables for every command; nothing is copied from the host.
        working_dir: Where commands run and relative paths point (absolute).
        sandbox_id: Attach to this running sandbox instead of creating one; ``close()`` then
            leaves it running.
        keep_alive: Extend the lifetime while the environment is used (at most one request per
            half lifetime).
        output_limit: Bytes kept per output stream of a command before it is stopped.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        project_id: str | None = None,
        template: str = "base",
        size: Size | None = None,
        lifetime_ms: int = 900_000,
        env_vars: Mapping[str, str] | None = None,
        working_dir: str = DEFAULT_WORKING_DIR,
        sandbox_id: str | None = None,
        keep_alive: bool = True,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> None:
        self._working_dir = check_dir("working_dir", working_dir)
        if isinstance(output_limit, bool) or not isinstance(output_limit, int):
            raise TypeError("output_limit must be an int")
        if output_limit <= 0:
            raise ValueError("output_limit must be positive")
        self._output_limit = output_limit
        self._new_session = functools.partial(
            make_session,
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=size,
            lifetime_ms=lifetime_ms,
            envs=env_vars,
            sandbox_id=sandbox_id,
            keep_alive=keep_alive,
        )
        self._new_session()  # validates every option now, with no I/O
        self._attached = sandbox_id is not None
        self._session: Session | None = None
        self._files: SandboxFiles | None = None
        self._is_initialized = False

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once ``initialize()`` created or attached it, else None."""
        return None if self._session is None else self._session.sandbox_id

    @property
    @override
    def working_dir(self) -> Path:
        """The working directory in the sandbox (a POSIX path)."""
        return Path(self._working_dir)

    def __repr__(self) -> str:
        return (
            f"LizardEnvironment(sandbox_id={self.sandbox_id!r}, working_dir={self._working_dir!r})"
        )

    @override
    async def initialize(self) -> None:
        """Create (or attach to) the sandbox; idempotent."""
        if self._session is None:
            # Kept before the first request: a cancelled create is still destroyed by close().
            self._session = self._new_session()
            self._files = SandboxFiles(self._session)
        await self._session.asandbox()
        self._is_initialized = True

    @override
    async def close(self) -> None:
        """Destroy the sandbox, unless it was attached to; idempotent."""
        session, self._session, self._files = self._session, None, None
        self._is_initialized = False
        if session is None:
            return
        if self._attached:
            await session.aclose()
        else:
            await session.adestroy()

    def _ready(self) -> tuple[Session, SandboxFiles]:
        if self._session is None or self._files is None or not self._is_initialized:
            raise RuntimeError("The Lizard sandbox is not started. Call initialize() first.")
        return self._session, self._files

    def _resolve(self, path: str | os.PathLike[str]) -> str:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or a path, not {type(path).__name__}")
        pure = PurePosixPath(os.fspath(path))
        return str(pure if pure.is_absolute() else PurePosixPath(self._working_dir) / pure)

    @override
    async def execute(self, command: str, *, timeout: float | None = None) -> ExecutionResult:
        """Run ``command`` with ``/bin/sh -c`` in ``working_dir``; see the module docstring."""
        session, _ = self._ready()
        try:
            result = await arun_command(
                session,
                command,
                shell=True,
                cwd=self._working_dir,
                create_cwd=True,
                timeout=timeout,
                output_limit=self._output_limit,
            )
        except CommandTimeoutError as error:
            return ExecutionResult(
                exit_code=TIMED_OUT_EXIT_CODE,
                stdout=_text(error.stdout),
                stderr=_text(error.stderr),
                timed_out=True,
            )
        return ExecutionResult(result.exit_code, _text(result.stdout), _text(result.stderr))

    @override
    async def read_file(self, path: str | os.PathLike[str]) -> bytes:
        """The file's exact bytes; ``FileNotFoundError`` if it is missing."""
        _, files = self._ready()
        return await files.aread_bytes(self._resolve(path))

    @override
    async def write_file(self, path: str | os.PathLike[str], content: str | bytes) -> None:
        """Write ``content`` (text as UTF-8), creating parent directories."""
        if isinstance(content, str):
            data = content.encode("utf-8")  # an unencodable text fails here, before any request
        elif isinstance(content, bytes | bytearray | memoryview):
            data = bytes(content)
        else:
            raise TypeError(f"content must be str or bytes, not {type(content).__name__}")
        _, files = self._ready()
        await files.awrite_bytes(self._resolve(path), data)
