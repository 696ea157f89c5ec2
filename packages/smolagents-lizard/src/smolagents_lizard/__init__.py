"""Run a smolagents ``CodeAgent``'s Python in Lizard Sandboxes.

``CodeAgent(executor=LizardExecutor(...))``: the model calls stay on the host, every step runs in
a persistent Python namespace inside a Lizard sandbox. See ``LizardExecutor`` for the options and
the package README for the behaviour and limits.
"""

from smolagents_lizard._errors import PackageInstallError, SandboxUnavailableError, StepError
from smolagents_lizard._executor import LizardExecutor
from smolagents_lizard._final_answer import FinalAnswerError

__all__ = [
    "FinalAnswerError",
    "LizardExecutor",
    "PackageInstallError",
    "SandboxUnavailableError",
    "StepError",
]
