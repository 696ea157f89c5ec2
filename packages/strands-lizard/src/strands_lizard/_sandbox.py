"""``LizardSandbox``: a Strands ``Sandbox`` that runs commands, code and files in a Lizard sandbox.

Contract (proven against lizard-local in ``tests/``, through Strands' ``Agent`` and its tools):

- **No I/O until first use.** Building checks every argument (``TypeError`` / ``ValueError``) and
  makes no request. The first operation creates the sandbox (or attaches to ``sandbox_id``) once,
  however many tool calls or sub-agents race for it. Strands never closes a sandbox: call
  :meth:`LizardSandbox.close` or use ``async with`` / ``with``, which destroy a sandbox this object
  created and leave one it attached to running (:meth:`LizardSandbox.kill` destroys either).
- **Live output.** :meth:`~LizardSandbox.execute_streaming` runs ``/bin/sh -c command`` and yields
  each ``StreamChunk`` as the output arrives in the sandbox, then one ``ExecutionResult``;
  cancelling the consuming task (or closing the generator) stops the command's process group.
  One request per command.
- **Code.** :meth:`~LizardSandbox.execute_code_streaming` pipes the code to the interpreter named
  by ``language`` (checked against Strands' pattern), as Strands' shell sandboxes do. With
  ``stateful_python=True``, ``python`` / ``python3`` code runs in one persistent kernel instead:
  variables, imports and functions live on between calls (the value of a last expression is
  printed, images come back as ``output_files``); a call given a ``cwd`` runs a fresh process.
- **Timeouts** raise Strands' ``SandboxTimeoutError`` with the partial output; ``env`` names
  that are not POSIX names raise ``ValueError``. Output past ``output_limit`` is an error with
  its head and tail, never a short success.
- **Files.** Relative paths resolve against ``working_dir``. ``read_file`` streams the file in
  pieces up to ``max_file_bytes``; ``write_file`` creates parents and replaces atomically, large
  contents in pieces (never base64 in argv); ``remove_file`` removes a file (a directory is
  ``IsADirectoryError``); ``list_files`` of a missing directory is ``SandboxPathNotFoundError``.
  One request per small file operation.
- **Tools.** :meth:`~LizardSandbox.get_tools` vends Strands' shell, file editor and (where Strands
  has it) Python REPL, bound to this sandbox, as Strands' Docker sandbox does.
- **Credentials** stay on the host: nothing from its environment enters the sandbox but ``envs``.
"""

from __future__ import annotations

import codecs
import errno
import posixpath
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Final, Unpack

from strands.sandbox import ExecutionResult, FileInfo, OutputFile, Sandbox, StreamChunk
from strands.sandbox.constants import LANGUAGE_PATTERN
from strands.sandbox.errors import SandboxPathNotFoundError
from strands.sandbox.posix_shell import validate_env_keys
from strands.types.tools import AgentTool

from lizard_core import errors as core_errors
from lizard_core import kernel as core_kernel
from lizard_core.checks import (
    check_absolute_path,
    check_positive_int,
    check_seconds,
    package_version,
)
from lizard_core.closing import ClosesOnExit
from lizard_core.commands import DEFAULT_OUTPUT_LIMIT, UNTIMED_EXEC_S, stream_command
from lizard_core.config import SandboxConfig, SandboxOptions, refuse_creation_options
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.streaming import OutputStream

from ._errors import decode, sandbox_errors, timeout_error
from ._tools import vended_tools

__all__ = ["DEFAULT_WORKING_DIR", "MAX_FILE_BYTES", "LizardSandbox"]

DEFAULT_WORKING_DIR: Final = "/workspace"
"""Where commands and code start and relative paths resolve (created on first use)."""
MAX_FILE_BYTES: Final = 256 * 1024 * 1024
"""The largest file :meth:`LizardSandbox.read_file` brings to the host by default."""
INTEGRATION: Final = "strands"
"""The integration's name in the metadata of every sandbox it creates."""
_PYTHONS: Final = ("python", "python3")
_CELL_CUT: Final = "The cell's output passed output_limit; the rest was left out (the cell ran on)."


class LizardSandbox(Sandbox, ClosesOnExit):
    """A Strands ``Sandbox`` backed by one Lizard sandbox: ``Agent(sandbox=LizardSandbox())``.

    Args:
        sandbox_id: A running sandbox to attach to; :meth:`close` leaves it running.
        working_dir: Absolute directory commands and code start in (created if missing).
        timeout: Default seconds a command or cell may run (None: the platform's hour).
        stateful_python: Run ``python`` / ``python3`` code in one persistent kernel.
        output_limit: Bytes of output per stream a command may write before it is stopped.
        max_file_bytes: The largest file :meth:`read_file` returns (larger: ``OSError(EFBIG)``).
        keep_alive: Extend the sandbox's lifetime while it is used.
        **options: The sandbox's settings (:class:`lizard_core.config.SandboxOptions`:
            ``api_key``, ``project_id``, ``template``, ``lifetime_ms``, ``envs``, ...); the API
            key stays on the host.
    """

    def __init__(
        self,
        *,
        sandbox_id: str | None = None,
        working_dir: str = DEFAULT_WORKING_DIR,
        timeout: float | None = None,
        stateful_python: bool = False,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        max_file_bytes: int = MAX_FILE_BYTES,
        keep_alive: bool = False,
        **options: Unpack[SandboxOptions],
    ) -> None:
        self._working_dir = posixpath.normpath(check_absolute_path(working_dir, name="working_dir"))
        self._timeout = None if timeout is None else check_seconds(timeout)
        if type(stateful_python) is not bool:
            raise TypeError("stateful_python must be a bool")
        self._output_limit = check_positive_int(output_limit, name="output_limit")
        self._max_file_bytes = check_positive_int(max_file_bytes, name="max_file_bytes")
        if sandbox_id is not None:
            refuse_creation_options(options)
        config = SandboxConfig.from_env(
            **options,
            integration=INTEGRATION,
            integration_version=package_version("strands-lizard"),
        )
        self._session = Session(config, sandbox_id=sandbox_id, keep_alive=keep_alive)
        self._files = SandboxFiles(self._session)
        self._kernel = (
            core_kernel.Kernel(
                self._session,
                name="strands",
                cwd=self._working_dir,
                max_output_bytes=max(self._output_limit, 1024),  # the kernel's floor
            )
            if stateful_python
            else None
        )
        self._kernel_used = False

    # ── identity and lifetime ────────────────────────────────────────────

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once it was created or attached to (no request), else None."""
        return self._session.sandbox_id

    @property
    def working_dir(self) -> str:
        """Where commands start and relative paths resolve."""
        return self._working_dir

    def __repr__(self) -> str:
        return f"LizardSandbox(sandbox_id={self.sandbox_id!r}, working_dir={self._working_dir!r})"

    def close(self) -> None:
        """Destroy the sandbox this object created (even mid-create), else stop using it."""
        with sandbox_errors():
            if self._kernel is not None and self._kernel_used and not self._session.created:
                self._kernel_used = False
                self._kernel.close()  # an attached sandbox lives on: stop the kernel daemon
            self._session.release()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        with sandbox_errors():
            if self._kernel is not None and self._kernel_used and not self._session.created:
                self._kernel_used = False
                await self._kernel.aclose()
            await self._session.arelease()

    def kill(self) -> None:
        """Destroy the sandbox, whoever created it; idempotent."""
        with sandbox_errors():
            self._session.destroy()

    async def akill(self) -> None:
        """Async :meth:`kill`."""
        with sandbox_errors():
            await self._session.adestroy()

    def get_tools(self) -> list[AgentTool]:
        """Strands' shell, file editor and Python REPL tools, bound to this sandbox."""
        return vended_tools(self, stateful_python=self._kernel is not None)

    # ── commands and code ────────────────────────────────────────────────

    def _path(self, path: str) -> str:
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        return posixpath.normpath(posixpath.join(self._working_dir, path))

    def _limit(self, timeout: float | None) -> float | None:
        return self._timeout if timeout is None else check_seconds(timeout)

    def _env(self, env: Mapping[str, str] | None) -> Mapping[str, str] | None:
        if env:
            validate_env_keys(dict(env))
        return env

    async def execute_streaming(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, enforced in the guest
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        """Run ``command`` with ``/bin/sh -c``, yielding its output live, then its result."""
        stream = self._command(command, True, None, timeout, cwd, env)
        # aclosing: closing this generator closes the relay at once, which stops the command.
        async with aclosing(_relay(stream)) as items:
            async for item in items:
                yield item

    async def execute_code_streaming(
        self,
        code: str,
        language: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the code's limit, enforced in the guest
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        """Run ``code`` with the interpreter ``language`` (its stdin), yielding output live."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if not isinstance(language, str) or not LANGUAGE_PATTERN.fullmatch(language):
            raise ValueError(f"language parameter contains invalid characters: {language!r}")
        if self._kernel is not None and language in _PYTHONS and cwd is None:
            limit = self._limit(timeout) or UNTIMED_EXEC_S
            cell = self._kernel.stream(code, timeout=limit, env=self._env(env))
            self._kernel_used = True
            relay = _relay_cell(cell, limit)
        else:
            relay = _relay(self._command([language], False, code.encode(), timeout, cwd, env))
        async with aclosing(relay) as items:
            async for item in items:
                yield item

    def _command(
        self,
        command: str | Sequence[str],
        shell: bool,
        input: bytes | None,
        timeout: float | None,
        cwd: str | None,
        env: Mapping[str, str] | None,
    ) -> OutputStream[Any]:
        directory = self._working_dir if cwd is None else self._path(cwd)
        return stream_command(
            self._session,
            command,
            shell=shell,
            cwd=directory,
            create_cwd=directory == self._working_dir,  # a mistyped cwd is FileNotFoundError
            env=self._env(env),
            timeout=self._limit(timeout),
            output_limit=self._output_limit,
            input=input,
        )

    # ── files ────────────────────────────────────────────────────────────

    async def read_file(self, path: str, **kwargs: Any) -> bytes:
        """The file's bytes, read in pieces (``OSError(EFBIG)`` past ``max_file_bytes``)."""
        target = self._path(path)
        data = bytearray()
        with sandbox_errors():
            async with aclosing(self._files.aiter_bytes(target)) as pieces:
                async for piece in pieces:
                    if len(data) + len(piece) > self._max_file_bytes:
                        too_big = f"larger than max_file_bytes ({self._max_file_bytes})"
                        raise OSError(errno.EFBIG, too_big, target)
                    data += piece
        return bytes(data)

    async def write_file(self, path: str, content: bytes, **kwargs: Any) -> None:
        """Write ``content`` (parents created, replaced atomically; large files in pieces)."""
        if not isinstance(content, bytes | bytearray | memoryview):
            raise TypeError(f"content must be bytes, not {type(content).__name__}")
        with sandbox_errors():
            await self._files.awrite_bytes(self._path(path), bytes(content))

    async def remove_file(self, path: str, **kwargs: Any) -> None:
        """Remove a file or symlink (FileNotFoundError if missing, IsADirectoryError for one)."""
        with sandbox_errors():
            await self._files.aremove(self._path(path), recursive=False)

    async def list_files(self, path: str, **kwargs: Any) -> list[FileInfo]:
        """The directory's entries, sorted by name (hidden ones included)."""
        target = self._path(path)
        with sandbox_errors():
            try:
                entries = await self._files.alist_dir(target)
            except (FileNotFoundError, NotADirectoryError):
                raise SandboxPathNotFoundError(path) from None
        return [FileInfo(name=e.name, is_dir=e.is_dir, size=e.size) for e in entries]


async def _relay(stream: OutputStream[Any]) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
    """A command's chunks as Strands' ``StreamChunk``s (UTF-8 decoded across chunk boundaries)."""
    decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in ("stdout", "stderr")}
    async with stream:
        with sandbox_errors():
            async for chunk in stream:
                text = decoders[chunk.stream].decode(chunk.data)
                if text:
                    yield StreamChunk(data=text, stream_type=chunk.stream)
            result = stream.result
    for name, decoder in decoders.items():
        if tail := decoder.decode(b"", final=True):
            yield StreamChunk(data=tail, stream_type="stdout" if name == "stdout" else "stderr")
    yield ExecutionResult(result.exit_code, decode(result.stdout), decode(result.stderr))


async def _relay_cell(
    stream: OutputStream[core_kernel.ExecutionResult], limit: float
) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
    """A kernel cell's output as chunks, then its outcome as a process would give it."""
    async with stream:
        with sandbox_errors():
            async for chunk in stream:
                yield StreamChunk(data=decode(chunk.data), stream_type=chunk.stream)
            cell = stream.result
            if cell.output_truncated:  # as a command past output_limit: an error, not a cut
                out, err = cell.stdout.encode(), cell.stderr.encode()
                raise core_errors.OutputLimitError(_CELL_CUT, stdout=out, stderr=err)
    stdout, stderr = cell.stdout, cell.stderr
    if cell.text is not None:
        stdout += cell.text + "\n"
        yield StreamChunk(data=cell.text + "\n")
    if cell.error is not None and not cell.timed_out:
        stderr += cell.error.traceback or f"{cell.error.name}: {cell.error.message}\n"
    if cell.notice:
        stderr += f"\n{cell.notice}\n"
    if cell.timed_out:
        raise timeout_error(limit, stdout, stderr)
    pngs = [png for png in (r.png for r in cell.results) if png is not None]
    files = [OutputFile(f"output-{i}.png", png, "image/png") for i, png in enumerate(pngs, 1)]
    yield ExecutionResult(int(cell.error is not None), stdout, stderr, output_files=files)
