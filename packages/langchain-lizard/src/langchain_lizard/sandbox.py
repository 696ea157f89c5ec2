"""0.1.0's import path: ``from langchain_lizard.sandbox import LizardSandbox`` keeps working."""

from ._sandbox import LizardSandbox

__all__ = ["LizardSandbox"]
