"""``LizardPlugin``: 0.1's four tools and one sandbox per ADK invocation, now on ``lizard_core``.

Kept for 0.1 users (``from lizard_adk import LizardPlugin`` and ``lizard_adk.plugin`` both work);
new code should prefer ``LizardEnvironment`` with ADK's ``EnvironmentToolset``, or
``LizardCodeExecutor``. What changed from 0.1.1 is only what it could not do (tested in
``tests/test_plugin.py``):

- Files of any size and content: ``lizard_read_file`` returns ``content`` for UTF-8 text and
  ``content_base64`` for anything else; ``lizard_write_file`` takes ``encoding="base64"`` for
  binary content. The 1 MiB cap is gone.
- ``command_timeout_ms`` has no 120 s cap: any positive value is honoured. A command or cell
  that passes it returns its output so far with ``timed_out: true`` instead of failing the tool.
- Any template and size (``template`` is new; the default is still ``interpreter``); commands
  and code need no Jupyter in the sandbox.

Unchanged: register ``get_tools()`` on the agent and the plugin on the ``App``; each invocation
gets its own sandbox, created by its first tool call and destroyed when the invocation ends;
Python state persists across ``lizard_execute_code`` calls of one invocation; ``close()``
destroys what is left, keeps what it could not destroy and may be retried. No sandbox id or key
goes into ADK session state or a tool result.
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass
from typing import Any

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.llm_agent import ToolUnion
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext

from lizard_core.commands import arun_command
from lizard_core.config import Size
from lizard_core.errors import CommandTimeoutError
from lizard_core.files import SandboxFiles
from lizard_core.kernel import Kernel
from lizard_core.session import Session

from ._environment import DEFAULT_WORKING_DIR
from ._sandbox import make_session

__all__ = ["LizardPlugin"]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class _Sandbox:
    session: Session
    kernel: Kernel
    files: SandboxFiles


class LizardPlugin(BasePlugin):
    """Give an ADK invocation shell, code and file tools in its own sandbox (0.1 interface).

    Register both ``plugin.get_tools()`` on the agent and ``plugins=[plugin]`` on the ADK
    ``App``, and close the runner in a ``finally`` block.
    """

    def __init__(
        self,
        *,
        project_id: str | None = None,
        api_key: str | None = None,
        api_url: str | None = None,
        size: Size | None = "small",
        lifetime_ms: int = 900_000,
        command_timeout_ms: int = 60_000,
        template: str = "interpreter",
    ) -> None:
        if isinstance(command_timeout_ms, bool) or not isinstance(command_timeout_ms, int):
            raise TypeError("command_timeout_ms must be an int")
        if command_timeout_ms <= 0:
            raise ValueError("command_timeout_ms must be positive")
        self._new_session = functools.partial(
            make_session,
            api_key=api_key,
            api_url=api_url,
            project_id=project_id,
            template=template,
            size=size,
            lifetime_ms=lifetime_ms,
            envs=None,
            keep_alive=False,
        )
        self._new_session()  # validates every option now, with no I/O
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

    def _sandbox(self, invocation_id: str) -> _Sandbox:
        if self._closed:
            raise RuntimeError("The Lizard plugin is closed.")
        if invocation_id not in self._sandboxes:
            # No request yet: the first operation creates the sandbox, recorded on the session.
            session = self._new_session()
            self._sandboxes[invocation_id] = _Sandbox(
                session, Kernel(session, cwd=DEFAULT_WORKING_DIR), SandboxFiles(session)
            )
        return self._sandboxes[invocation_id]

    async def lizard_execute_command(  # noqa: D417 - tool_context is ADK's, not the model's
        self, command: str, tool_context: ToolContext, cwd: str = DEFAULT_WORKING_DIR
    ) -> dict[str, Any]:
        """Run a shell command in this invocation's sandbox.

        Args:
            command: Shell command to run in the sandbox.
            cwd: Absolute working directory inside the sandbox.
        """
        box = self._sandbox(tool_context.invocation_id)
        try:
            result = await arun_command(
                box.session, command, shell=True, cwd=cwd, timeout=self._timeout
            )
        except CommandTimeoutError as error:
            return {
                "stdout": _text(error.stdout),
                "stderr": _text(error.stderr),
                "exit_code": -1,
                "timed_out": True,
            }
        return {
            "stdout": _text(result.stdout),
            "stderr": _text(result.stderr),
            "exit_code": result.exit_code,
        }

    async def lizard_execute_code(  # noqa: D417
        self, code: str, tool_context: ToolContext
    ) -> dict[str, Any]:
        """Run Python code; variables persist within this invocation.

        Args:
            code: Python source code to run in the sandbox's persistent Python kernel.
        """
        box = self._sandbox(tool_context.invocation_id)
        result = await box.kernel.aexecute(code, timeout=self._timeout)
        answer: dict[str, Any] = {
            "stdout": result.stdout,
            "stderr": result.stderr,
            "results": [
                {"mime": mime, "data": data}
                for shown in result.results
                for mime, data in shown.data.items()
            ],
            "error": None
            if result.error is None
            else {"name": result.error.name, "message": result.error.message},
        }
        if result.timed_out:
            answer["timed_out"] = True
        if result.notice:
            answer["notice"] = result.notice
        return answer

    async def lizard_read_file(  # noqa: D417
        self, path: str, tool_context: ToolContext
    ) -> dict[str, Any]:
        """Read a file: UTF-8 text comes as ``content``, other bytes as ``content_base64``.

        Args:
            path: Absolute file path inside the sandbox.
        """
        box = self._sandbox(tool_context.invocation_id)
        data = await box.files.aread_bytes(path)
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
        if encoding == "base64":
            data = base64.b64decode(content, validate=True)
        else:
            data = content.encode("utf-8")
        box = self._sandbox(tool_context.invocation_id)
        await box.files.awrite_bytes(path, data)
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
