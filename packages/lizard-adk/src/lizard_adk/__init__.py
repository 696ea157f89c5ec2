"""Google ADK agents in Lizard Sandboxes, on ``lizard_core``.

- :class:`LizardEnvironment`: an ADK ``BaseEnvironment`` for ``EnvironmentToolset`` (shell
  commands and files in one sandbox).
- :class:`LizardCodeExecutor`: an ADK ``BaseCodeExecutor`` on a persistent Python kernel in the
  sandbox (``stateful=True`` keeps variables between code blocks).
- :class:`LizardPlugin`: 0.1's plugin with its four tools, kept for existing users.

This package never talks to the Lizard API itself; errors are ``lizard_core.errors`` kinds.
"""

from ._environment import LizardEnvironment
from ._executor import LizardCodeExecutor
from ._sandbox import SandboxOptions
from .plugin import LizardPlugin

__all__ = ["LizardCodeExecutor", "LizardEnvironment", "LizardPlugin", "SandboxOptions"]
