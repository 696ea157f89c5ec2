"""Strands Agents' sandbox in Lizard Sandboxes: ``Agent(sandbox=LizardSandbox())``.

:class:`LizardSandbox` is a ``strands.sandbox.Sandbox``: the agent's shell, file editor and
Python REPL run in a Firecracker microVM, with output streamed as the command runs. Built on
``lizard_core``: this package never talks to the Lizard API itself.
"""

from ._errors import LizardSandboxError, SandboxUnavailableError
from ._sandbox import DEFAULT_WORKING_DIR, MAX_FILE_BYTES, LizardSandbox

__all__ = [
    "DEFAULT_WORKING_DIR",
    "MAX_FILE_BYTES",
    "LizardSandbox",
    "LizardSandboxError",
    "SandboxUnavailableError",
]
