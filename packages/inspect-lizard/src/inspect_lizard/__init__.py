"""Lizard Sandboxes for Inspect AI: ``sandbox="lizard"``.

Installing the package registers the sandbox type ``lizard`` through Inspect's ``inspect_ai``
entry point, so ``Task(sandbox="lizard")``, ``sandbox=("lizard", LizardSandboxConfig(...))`` and
``inspect eval --sandbox lizard`` work with no import. Built on ``lizard_core``: this package
never talks to the Lizard API itself.
"""

from inspect_ai.util import sandboxenv

from ._config import LizardSandboxConfig
from ._environment import LizardSandboxEnvironment
from ._errors import LizardSandboxError

sandboxenv("lizard")(LizardSandboxEnvironment)

__all__ = ["LizardSandboxConfig", "LizardSandboxEnvironment", "LizardSandboxError"]
