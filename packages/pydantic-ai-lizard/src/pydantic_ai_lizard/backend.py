"""Deprecated module path from 0.1.0: import from `pydantic_ai_lizard` instead."""

import warnings

from ._backend import LizardSandboxBackend

__all__ = ["LizardSandboxBackend"]

warnings.warn(
    "pydantic_ai_lizard.backend is deprecated; import LizardSandboxBackend from pydantic_ai_lizard",
    DeprecationWarning,
    stacklevel=2,
)
