"""LangChain Deep Agents' shell and file tools in Lizard Sandboxes.

``LizardSandbox`` is a Deep Agents ``BaseSandbox`` backend: pass it to
``create_deep_agent(backend=...)`` and the agent's ``execute``, ``ls``, ``read_file``,
``write_file``, ``edit_file``, ``grep`` and ``glob`` tools run in a Firecracker microVM. Built on
``lizard_core``: this package never talks to the Lizard API itself.
"""

from ._errors import LizardSandboxError, SandboxUnavailableError
from ._sandbox import DEFAULT_TEMPLATE, DEFAULT_TIMEOUT, LizardSandbox

__all__ = [
    "DEFAULT_TEMPLATE",
    "DEFAULT_TIMEOUT",
    "LizardSandbox",
    "LizardSandboxError",
    "SandboxUnavailableError",
]
