"""``LizardTool``: run an agent's shell commands in a Lizard sandbox.

The seam that __TITLE__ calls.

Contract (proven against lizard-local in ``tests/test_tool.py``, and by the shared adapter
contract in ``tests/test_contract.py``):

- **No I/O until first use.** Building a tool checks every argument (``TypeError`` /
  ``ValueError``) and makes no request. The first command creates the sandbox (one
  ``POST /api/sandboxes``); after that, each command is one exec request.
- **Results.** :meth:`LizardTool.run` and :meth:`LizardTool.arun` run the command under
  ``/bin/sh -c`` and return a :class:`CommandOutput`; a non-zero exit is a result, not an error.
  Failures are mapped in one place, ``_errors.tool_errors``.
- **Cleanup.** :meth:`LizardTool.close` / :meth:`LizardTool.aclose` (and leaving a ``with`` block)
  destroy the sandbox; calling them again does nothing. A closed tool raises
  :class:`~__MODULE__._errors.SandboxUnavailableError`.
- **Cancellation.** Cancelling :meth:`LizardTool.arun`'s task, or Ctrl-C during
  :meth:`LizardTool.run`, stops the command's process group before the call returns.
- **Credentials.** The API key stays on the host: nothing from the host's environment enters the
  sandbox except ``envs``.

To adapt it to __TITLE__: wrap (or subclass) this class in the framework's
tool type, name and describe it the way __TITLE__ presents tools to the model,
and map errors in ``_errors.py``. A code executor would hold a
``lizard_core.kernel.Kernel`` instead of running commands (and install what its code imports with
``lizard_core.packages``); a workspace or file tool would add ``lizard_core.files``. See
docs/adding-an-adapter.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final, Unpack

from lizard_core.checks import check_seconds, package_version
from lizard_core.closing import ClosesOnExit
from lizard_core.commands import CommandResult, arun_command, run_command
from lizard_core.config import SandboxConfig, SandboxOptions
from lizard_core.session import Session

from ._errors import decode_output, tool_errors

__all__ = ["DEFAULT_TIMEOUT", "OUTPUT_LIMIT", "CommandOutput", "LizardTool"]

DEFAULT_TIMEOUT: Final = 60.0
"""Seconds a command may run before it is stopped."""

OUTPUT_LIMIT: Final = 1024 * 1024
"""Bytes of output kept per stream; past it the command is stopped (``LizardToolError``)."""

INTEGRATION: Final = "__FRAMEWORK__"
"""The integration's name in the metadata of every sandbox it creates."""


@dataclass(frozen=True)
class CommandOutput:
    """A finished command: its exit code and its output as text."""

    exit_code: int
    """The command's exit code; 127 means the program was not found."""
    stdout: str
    """Everything the command wrote to stdout (invalid UTF-8 replaced)."""
    stderr: str
    """Everything the command wrote to stderr (invalid UTF-8 replaced)."""

    def __str__(self) -> str:
        """The observation to give the model."""
        parts = [f"exit code {self.exit_code}"]
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout.rstrip()}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr.rstrip()}")
        return "\n".join(parts)


class LizardTool(ClosesOnExit):
    """Run shell commands in one Lizard sandbox.

    Args:
        timeout: Seconds each command may run.
        **options: The sandbox's settings, :class:`lizard_core.config.SandboxOptions`
            (``api_key``, ``project_id``, ``template``, ``size``, ``lifetime_ms``, ``envs``, ...);
            the API key stays on the host, and nothing but ``envs`` is copied into the sandbox.
    """

    name: ClassVar[str] = "lizard_shell"
    """The tool's name as the model sees it."""
    description: ClassVar[str] = (
        "Run a shell command in an isolated Linux sandbox and return its exit code and output."
    )
    """The tool's description as the model sees it."""

    def __init__(
        self, *, timeout: float = DEFAULT_TIMEOUT, **options: Unpack[SandboxOptions]
    ) -> None:
        self._timeout = check_seconds(timeout)
        config = SandboxConfig.from_env(
            **options,
            integration=INTEGRATION,
            integration_version=package_version("__DIST__"),
        )
        self._session = Session(config)

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id once the first command created it, else None."""
        return self._session.sandbox_id

    def __repr__(self) -> str:
        return f"LizardTool(sandbox_id={self.sandbox_id!r})"

    def run(self, command: str) -> CommandOutput:
        """Run ``command`` with ``/bin/sh -c`` and wait for it (blocking)."""
        with tool_errors():
            return _output(run_command(self._session, command, **self._options()))

    async def arun(self, command: str) -> CommandOutput:
        """Async :meth:`run`; cancelling the task stops the command."""
        with tool_errors():
            return _output(await arun_command(self._session, command, **self._options()))

    def _options(self) -> dict[str, Any]:
        return {"shell": True, "timeout": self._timeout, "output_limit": OUTPUT_LIMIT}

    def close(self) -> None:
        """Destroy the sandbox (blocking); idempotent. A sandbox already gone counts as done."""
        with tool_errors():
            self._session.destroy()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        with tool_errors():
            await self._session.adestroy()


def _output(result: CommandResult) -> CommandOutput:
    return CommandOutput(
        result.exit_code, decode_output(result.stdout), decode_output(result.stderr)
    )
