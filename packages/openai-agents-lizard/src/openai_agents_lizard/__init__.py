"""Lizard Sandboxes for the OpenAI Agents SDK's ``SandboxAgent``.

``LizardSandboxClient`` creates, resumes and deletes sandbox sessions; pass it with
``LizardSandboxClientOptions`` in ``RunConfig(sandbox=SandboxRunConfig(...))``. Built on
``lizard_core``: this package never talks to the Lizard API itself.
"""

from ._client import LizardSandboxClient, SandboxCreateError
from ._options import LizardSandboxClientOptions, LizardSandboxSessionState
from ._session import LizardSandboxSession

__all__ = [
    "LizardSandboxClient",
    "LizardSandboxClientOptions",
    "LizardSandboxSession",
    "LizardSandboxSessionState",
    "SandboxCreateError",
]
