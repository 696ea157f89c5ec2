"""``LizardPlugin``: 0.1's four tools and one sandbox per ADK invocation, now on ``lizard_core``.

Kept for 0.1 users (``lizard_adk.LizardPlugin`` and ``lizard_adk.plugin.LizardPlugin``); new
code should prefer ``LizardEnvironment`` or ``LizardCodeExecutor``. Changed from 0.1.1 only
where it was limited (``tests/test_plugin.py``): files of any content (``lizard_read_file``
gives ``content`` for UTF-8 text, else ``content_base64``, and refuses, in its answer, a file
over ``max_read_bytes``, 1 MiB by default as in 0.1.1; ``lizard_write_file`` takes
``encoding="base64"``); ``command_timeout_ms`` (default 30 minutes) has no 120 s cap, and a
command or cell that passes it returns its output so far with ``timed_out: true``; output goes
to the model as its head and tail around a marker past ``max_output_chars``, and a command
stopped at ``output_limit`` bytes is a result that says so; any template (still ``interpreter``
by default) and the other sandbox options; keep-alive on, as for every adapter. Unchanged: register
``get_tools()`` on the agent and the plugin on the ``App``; each invocation gets its own sandbox,
created by its first tool call and destroyed when it ends; Python state lasts for the
invocation; ``close()`` destroys what is left, keeps what it could not and may be retried.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from typing import Any, Final, Unpack

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.llm_agent import ToolUnion
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from lizard_core import Kernel
from lizard_core.commands import DEFAULT_OUTPUT_LIMIT, arun_command
from lizard_core.errors import CommandTimeoutError, OutputLimitError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.truncation import MODEL_OUTPUT_LIMIT, head_and_tail, stopped_note

from ._environment import DEFAULT_WORKING_DIR
from ._sandbox import SandboxOptions, make_session

__all__ = ["DEFAULT_COMMAND_TIMEOUT_MS", "DEFAULT_MAX_READ_BYTES", "LizardPlugin"]

DEFAULT_COMMAND_TIMEOUT_MS: Final = 1_800_000
"""Milliseconds a command or cell may run: 30 minutes, as the other adapters."""
DEFAULT_MAX_READ_BYTES: Final = 1024 * 1024
"""Bytes of a file ``lizard_read_file`` hands the model (0.1.1's limit)."""

_DEFAULTS: dict[str, Any] = {"template": "interpreter", "size": "small"}


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Sandbox:
    session: Session
    kernel: Kernel
    files: SandboxFiles


class LizardPlugin(BasePlugin):
    """Give each ADK invocation shell, code and file tools in its own sandbox (0.1 interface).

    Keyword arguments: ``command_timeout_ms`` (per command or cell; default 30 minutes),
    ``max_read_bytes`` (largest file ``lizard_read_file`` returns; default 1 MiB),
    ``max_output_chars`` (characters of an output stream the model gets, as head and tail),
    ``output_limit`` (bytes of a stream after which a command is stopped) and the
    :class:`~lizard_adk.SandboxOptions` but ``sandbox_id`` (size ``small`` by default).
    """

    def __init__(
        self,
        *,
        command_timeout_ms: int = DEFAULT_COMMAND_TIMEOUT_MS,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        max_output_chars: int = MODEL_OUTPUT_LIMIT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        **options: Unpack[SandboxOptions],
    ):
        for name, value in (
            ("command_timeout_ms", command_timeout_ms),
            ("max_read_bytes", max_read_bytes),
            ("max_output_chars", max_output_chars),
            ("output_limit", output_limit),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int")
            if value <= 1:
                raise ValueError(f"{name} must be more than 1")
        if "sandbox_id" in options:
            raise ValueError("LizardPlugin creates a sandbox per invocation; it cannot attach")
        self._options = options
        make_session(options, **_DEFAULTS)  # validates every option now, with no I/O
        super().__init__(name="lizard_sandboxes")
        self._timeout = command_timeout_ms / 1000
        self._max_read = max_read_bytes
        self._max_chars = max_output_chars
        self._output_limit = output_limit
        self._sandboxes: dict[str, _Sandbox] = {}
        self._closed = False

    def get_tools(self) -> list[ToolUnion]:
        """Return the four tools to pass to an ADK ``Agent``."""
        return [
            FunctionTool(self.lizard_execute_command),
            FunctionTool(self.lizard_execute_code),
            FunctionTool(self.lizard_read_file),
            FunctionTool(self.lizard_write_file),
        ]

    def _sandbox(self, context: ToolContext) -> _Sandbox:
        if self._closed:
            raise RuntimeError("The Lizard plugin is closed.")
        if context.invocation_id not in self._sandboxes:
            session = make_session(self._options, **_DEFAULTS)  # no request until first use
            kernel = Kernel(session, cwd=DEFAULT_WORKING_DIR)
            self._sandboxes[context.invocation_id] = _Sandbox(
                session, kernel, SandboxFiles(session)
            )
        return self._sandboxes[context.invocation_id]

    async def lizard_execute_command(  # noqa: D417 - ADK fills tool_context, not the model
        self, command: str, tool_context: ToolContext, cwd: str = DEFAULT_WORKING_DIR
    ) -> dict[str, Any]:
        """Run a shell command in this invocation's sandbox.

        Args:
            command: Shell command to run in the sandbox.
            cwd: Absolute working directory inside the sandbox.
        """
        session = self._sandbox(tool_context).session
        try:
            done = await arun_command(
                session,
                command,
                shell=True,
                cwd=cwd,
                timeout=self._timeout,
                output_limit=self._output_limit,
            )
        except CommandTimeoutError as error:
            out, err = self._for_model(error.stdout), self._for_model(error.stderr)
            return {"stdout": out, "stderr": err, "exit_code": -1, "timed_out": True}
        except OutputLimitError as error:
            err = f"{self._for_model(error.stderr)}\n{stopped_note(error.limit)}".lstrip("\n")
            return {"stdout": self._for_model(error.stdout), "stderr": err, "exit_code": -1}
        return {
            "stdout": self._for_model(done.stdout),
            "stderr": self._for_model(done.stderr),
            "exit_code": done.exit_code,
        }

    def _for_model(self, data: bytes | str) -> str:
        text = data if isinstance(data, str) else _text(data)
        return head_and_tail(text, self._max_chars)

    async def lizard_execute_code(self, code: str, tool_context: ToolContext) -> dict[str, Any]:  # noqa: D417
        """Run Python code; variables persist within this invocation.

        Args:
            code: Python source code to run in the sandbox's persistent Python kernel.
        """
        result = await self._sandbox(tool_context).kernel.aexecute(code, timeout=self._timeout)
        error = result.error
        answer: dict[str, Any] = {
            "stdout": self._for_model(result.stdout),
            "stderr": self._for_model(result.stderr),
            "results": [{"mime": m, "data": d} for r in result.results for m, d in r.data.items()],
            "error": None if error is None else {"name": error.name, "message": error.message},
        }
        if result.timed_out:
            answer["timed_out"] = True
        if result.notice:
            answer["notice"] = result.notice
        return answer

    async def lizard_read_file(self, path: str, tool_context: ToolContext) -> dict[str, Any]:  # noqa: D417
        """Read a file: UTF-8 text comes as ``content``, other bytes as ``content_base64``.

        A file too large to return gives an ``error`` instead; read parts of it with a command.

        Args:
            path: Absolute file path inside the sandbox.
        """
        files = self._sandbox(tool_context).files
        pieces: list[bytes] = []
        size = 0
        # Read piece by piece, never holding more than the limit plus one piece.
        reader = files.aiter_bytes(path)
        async with contextlib.aclosing(reader) as chunks:
            async for chunk in chunks:
                size += len(chunk)
                if size > self._max_read:
                    return {
                        "error": (
                            f"{path} has more than {self._max_read} bytes, more than this tool "
                            "returns; read a part of it with lizard_execute_command (head -c, "
                            "tail -c, sed -n, grep)."
                        )
                    }
                pieces.append(chunk)
        data = b"".join(pieces)
        try:
            return {"content": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"content_base64": base64.b64encode(data).decode("ascii")}

    async def lizard_write_file(  # noqa: D417
        self, path: str, content: str, tool_context: ToolContext, encoding: str = "utf-8"
    ) -> dict[str, Any]:
        """Write a file, creating its parent directories if needed.

        Args:
            path: Absolute file path inside the sandbox.
            content: Text to write. Replaces an existing file.
            encoding: ``utf-8`` for text, or ``base64`` when content is base64-encoded bytes.
        """
        if encoding not in ("utf-8", "base64"):
            raise ValueError("encoding must be 'utf-8' or 'base64'")
        data = (
            base64.b64decode(content, validate=True) if encoding == "base64" else content.encode()
        )
        await self._sandbox(tool_context).files.awrite_bytes(path, data)
        return {"path": path, "written": True}

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Destroy this invocation's sandbox after the runner finishes it."""
        box = self._sandboxes.get(invocation_context.invocation_id)
        if box is not None:
            await box.session.adestroy()  # raises, keeping the entry, if it fails
            del self._sandboxes[invocation_context.invocation_id]

    async def close(self) -> None:
        """Destroy the remaining sandboxes, including those of failed invocations."""
        self._closed = True
        failures: list[Exception] = []
        for key, box in list(self._sandboxes.items()):
            try:
                await box.session.adestroy()
            except Exception as error:  # every sandbox gets its chance
                failures.append(error)
            else:
                del self._sandboxes[key]
        if failures:
            raise ExceptionGroup("Sandbox cleanup failed; close() can be retried", failures)
