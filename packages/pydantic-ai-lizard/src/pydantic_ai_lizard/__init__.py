"""Pydantic AI workspaces in Lizard Sandboxes.

`LizardSandbox` is the capability to add to an agent; `LizardSandboxBackend` is the workspace
backend itself, for applications that create, pass (`workspace=`), reconnect to and destroy
sandboxes themselves. Both build on `lizard_core`; neither talks to the Lizard API directly.
"""

from ._backend import LizardSandboxBackend
from ._capability import LizardSandbox

__all__ = ["LizardSandbox", "LizardSandboxBackend"]
