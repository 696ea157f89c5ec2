"""LangChain agents' shell commands in Lizard Sandboxes.

``LizardTool`` runs a command in a sandbox and returns its output; wrap it
in LangChain's tool type (see ``_tool.py``). Built on ``lizard_core``: this
package never talks to the Lizard API itself.
"""

from ._errors import LizardToolError, SandboxUnavailableError
from ._tool import CommandOutput, LizardTool

__all__ = ["CommandOutput", "LizardTool", "LizardToolError", "SandboxUnavailableError"]
