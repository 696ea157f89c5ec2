"""``LizardPlugin``: 0.1's four tools and one sandbox per ADK invocation, now on ``lizard_core``.

Kept for 0.1 users (``lizard_adk.LizardPlugin`` and ``lizard_adk.plugin.LizardPlugin``); new
code should prefer ``LizardEnvironment`` or ``LizardCodeExecutor``. Changed from 0.1.1 only
where it was limited (``tests/test_plugin.py``): files of any size and content
(``lizard_read_file`` gives ``content`` for UTF-8 text, else ``content_base64``;
``lizard_write_file`` takes ``encoding="base64"``); ``command_timeout_ms`` has no 120 s cap, and
a command or cell that passes it returns its output so far with ``timed_out: true``; any
template (still ``interpreter`` by default) and the other sandbox options. Unchanged: register
``get_tools()`` on the agent and the plugin on the ``App``; each invocation gets its own sandbox,
created by its first tool call and destroyed when it ends; Python state lasts for the
invocation; ``close()`` destroys what is left, keeps what it could not and may be retried.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Unpack

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.llm_agent import ToolUnion
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from lizard_core import Kernel
from lizard_core.commands import arun_command
from lizard_core.errors import CommandTimeoutError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session

from ._environment import DEFAULT_WORKING_DIR
from ._sandbox import SandboxOptions, make_session

__all__ = ["LizardPlugin"]

_DEFAULTS: dict[str, Any] = {"template": "interpreter", "size": "small", "keep_alive": False}


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Sandbox:
    session: Session
    kernel: Kernel
    files: SandboxFiles


class LizardPlugin(BasePlugin):
    """Give each ADK invocation shell, code and file tools in its own sandbox (0.1 interface).

    Keyword arguments: ``command_timeout_ms`` (per command or cell; default 60 s) and the
    :class:`~lizard_adk.SandboxOptions` but ``sandbox_id`` (size ``small`` by default).
    """

    def __init__(self, *, command_timeout_ms: int = 60_000, **options: Unpack[SandboxOptions]):
        if isinstance(command_timeout_ms, bool) or not isinstance(command_timeout_ms, int):
            raise TypeError("command_timeout_ms must be an int")
        if command_timeout_ms <= 0:
            raise ValueError("command_timeout_ms must be positive")
        if "sandbox_id" in options:
            raise ValueError("LizardPlugin creates a sandbox per invocation; it cannot attach")
        self._options = options
        make_session(options, **_DEFAULTS)  # validates every option now, with no I/O
        super().__init__(name="lizard_sandboxes")
        self._timeout = command_timeout_ms / 1000
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
            done = await arun_command(session, command, shell=True, cwd=cwd, timeout=self._timeout)
        except CommandTimeoutError as error:
            out, err = _text(error.stdout), _text(error.stderr)
            return {"stdout": out, "stderr": err, "exit_code": -1, "timed_out": True}
        return {
            "stdout": _text(done.stdout),
            "stderr": _text(done.stderr),
            "exit_code": done.exit_code,
        }

    async def lizard_execute_code(self, code: str, tool_context: ToolContext) -> dict[str, Any]:  # noqa: D417
        """Run Python code; variables persist within this invocation.

        Args:
            code: Python source code to run in the sandbox's persistent Python kernel.
        """
        result = await self._sandbox(tool_context).kernel.aexecute(code, timeout=self._timeout)
        error = result.error
        answer: dict[str, Any] = {
            "stdout": result.stdout,
            "stderr": result.stderr,
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

        Args:
            path: Absolute file path inside the sandbox.
        """
        data = await self._sandbox(tool_context).files.aread_bytes(path)
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
