"""``LizardEnvironment``: an ADK ``BaseEnvironment`` in one Lizard sandbox, on ``lizard_core``.

Contract (proven against lizard-local in ``tests/test_environment.py``, with the behaviours of
ADK's own ``LocalEnvironment`` tests):

- **Lifecycle.** Building it makes no request. ``initialize()`` creates the sandbox (from
  ``snapshot_id`` if given) or attaches to ``sandbox_id`` (resuming a paused one); ``close()``
  destroys one it created, leaves an attached one as it is, and ``initialize()`` afterwards
  starts over; both are idempotent. ``close(keep=True)`` (or ``keep=True`` when built, for the
  ``close()`` ADK's ``Runner`` makes through ``EnvironmentToolset``) pauses the sandbox and
  leaves it for a
  later run to attach to by :attr:`~LizardEnvironment.sandbox_id`: its files stay, its
  processes end, and only its disk bills (a pause that fails destroys it instead, never
  leaving it running). Use before ``initialize()`` or
  after ``close()`` is a ``RuntimeError``. A sandbox that expired or was killed raises
  ``SandboxGoneError`` and is never replaced (ADK's E2B environment would recreate it, files
  lost); ``keep_alive`` (on by default) extends the lifetime while the environment is used.
  A ``close()`` whose destroy fails keeps the sandbox, so that ``close()`` can be retried.
- **Commands.** ``/bin/sh -c`` in ``working_dir`` (created if missing), one request each; a
  non-zero exit is a result. ``timeout`` seconds (None: the platform's one-hour limit) stop the
  command's process group and return its output so far with ``timed_out`` and exit code -1,
  as ADK's E2B environment does. Output is UTF-8 with invalid bytes replaced, and goes to a
  model: a stream over ``max_output_chars`` comes back as its head and tail around a marker
  (:func:`lizard_core.truncation.head_and_tail`), with the exit code. Past ``output_limit``
  bytes on a stream the command is stopped: the result has the head and tail of what was kept,
  a note saying so and exit code -1; never an exception that would leave the model nothing.
  Cancelling the task stops the command.
- **Files.** Byte-exact, any size. Relative paths start at ``working_dir``; absolute ones may
  point anywhere in the sandbox, as in ADK's E2B and Daytona environments (the sandbox is the
  boundary). ``write_file`` creates parents and encodes text as UTF-8; text that cannot be
  encoded, or content that is not str or bytes, fails before any request. A missing file is
  ``FileNotFoundError``, as in ADK's local environment.
- **Errors.** Everything else is a ``lizard_core.errors`` kind: ADK has none for environments.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Final, Unpack

from google.adk.environment import BaseEnvironment, ExecutionResult

from lizard_core.commands import DEFAULT_OUTPUT_LIMIT, arun_command
from lizard_core.errors import CommandTimeoutError, OutputLimitError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.truncation import head_and_tail, stopped_note

from ._sandbox import SandboxOptions, check_dir, make_session

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "DEFAULT_WORKING_DIR", "LizardEnvironment"]

DEFAULT_WORKING_DIR: Final = "/home/user"
"""The sandbox user's home: where commands start and relative paths point."""
DEFAULT_MAX_OUTPUT_CHARS: Final = 29_800
"""Characters of a stream ``execute`` returns: ADK's Execute tool keeps the first 30,000 it is
given, so a head and tail cut here, marker included, reaches the model whole."""
TIMED_OUT_EXIT_CODE: Final = -1
STOPPED_EXIT_CODE: Final = -1
"""The exit code of a command stopped at ``output_limit`` (its own is lost)."""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _check_limit(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be positive, not {value}")
    return value


class LizardEnvironment(BaseEnvironment):
    """A Lizard sandbox as an ADK environment: ``EnvironmentToolset(environment=...)``.

    Takes the :class:`~lizard_adk.SandboxOptions` as keyword arguments (template ``base`` by
    default), plus ``working_dir`` (absolute; where commands run and relative paths point) and
    ``output_limit`` (bytes kept per output stream of a command before it is stopped) and
    ``keep`` (``close()`` pauses the sandbox for a later run instead of destroying it).
    """

    def __init__(
        self,
        *,
        working_dir: str = DEFAULT_WORKING_DIR,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        keep: bool = False,
        **options: Unpack[SandboxOptions],
    ) -> None:
        if type(keep) is not bool:
            raise TypeError("keep must be a bool")
        self._keep = keep
        self._working_dir = check_dir("working_dir", working_dir)
        self._output_limit = _check_limit("output_limit", output_limit)
        self._max_chars = _check_limit("max_output_chars", max_output_chars)
        if self._max_chars < 2:
            raise ValueError("max_output_chars must be at least 2")
        self._options = options
        make_session(options, template="base")  # validates every option now, with no I/O
        self._attached = options.get("sandbox_id") is not None
        self._session: Session | None = None
        self._kept_id: str | None = None
        self._files: SandboxFiles | None = None
        self._is_initialized = False

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once ``initialize()`` created or attached it, else None.

        Still set after ``close(keep=True)``: save it for the next run.
        """
        return self._kept_id if self._session is None else self._session.sandbox_id

    @property
    def working_dir(self) -> Path:
        """The working directory in the sandbox (a POSIX path)."""
        return Path(self._working_dir)

    def __repr__(self) -> str:
        return (
            f"LizardEnvironment(sandbox_id={self.sandbox_id!r}, working_dir={self._working_dir!r})"
        )

    async def initialize(self) -> None:
        """Create (or attach to) the sandbox; idempotent."""
        if self._session is None:
            # Kept before the first request: a cancelled create is still destroyed by close().
            self._session = make_session(self._options, template="base")
            self._files = SandboxFiles(self._session)
        await self._session.asandbox()
        self._is_initialized = True

    async def close(self, *, keep: bool | None = None) -> None:
        """Destroy the sandbox, unless it was attached to; idempotent.

        ``keep=True`` (default: as built) pauses it instead, either kind, and leaves it for a
        later run: save :attr:`sandbox_id` first; a sandbox already gone counts as done, and
        one whose pause fails is destroyed rather than left running (billing), the pause's
        error raised. A destroy that fails raises and keeps the sandbox, so ``close()`` can be
        retried.
        """
        keep = self._keep if keep is None else keep
        if type(keep) is not bool:
            raise TypeError("keep must be a bool")
        session = self._session
        self._is_initialized = False
        if session is None:
            return
        if keep:
            await session.akeep_paused()
            self._kept_id = session.sandbox_id
        elif self._attached:
            await session.aclose()
        else:
            await session.adestroy()  # raises, keeping the session, if the destroy fails
        self._session, self._files = None, None

    def _ready(self) -> tuple[Session, SandboxFiles]:
        if self._session is None or self._files is None or not self._is_initialized:
            raise RuntimeError("The Lizard sandbox is not started. Call initialize() first.")
        return self._session, self._files

    def _resolve(self, path: str | os.PathLike[str]) -> str:
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or a path, not {type(path).__name__}")
        pure = PurePosixPath(os.fspath(path))
        return str(pure if pure.is_absolute() else PurePosixPath(self._working_dir) / pure)

    async def execute(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - ADK's signature; enforced in the guest
    ) -> ExecutionResult:
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
                stdout=self._for_model(error.stdout),
                stderr=self._for_model(error.stderr),
                timed_out=True,
            )
        except OutputLimitError as error:
            note = stopped_note(error.limit)
            return ExecutionResult(
                exit_code=STOPPED_EXIT_CODE,
                stdout=self._for_model(error.stdout),
                stderr=f"{self._for_model(error.stderr)}\n{note}".lstrip("\n"),
            )
        return ExecutionResult(
            result.exit_code, self._for_model(result.stdout), self._for_model(result.stderr)
        )

    def _for_model(self, data: bytes) -> str:
        return head_and_tail(_text(data), self._max_chars)

    async def read_file(self, path: str | os.PathLike[str]) -> bytes:
        """The file's exact bytes; ``FileNotFoundError`` if it is missing."""
        _, files = self._ready()
        return await files.aread_bytes(self._resolve(path))

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
