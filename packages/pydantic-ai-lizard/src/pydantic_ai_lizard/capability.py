"""Deprecated module path from 0.1.0: import from `pydantic_ai_lizard` instead."""

import warnings

from ._capability import LizardSandbox

__all__ = ["LizardSandbox"]

warnings.warn(
    "pydantic_ai_lizard.capability is deprecated; import LizardSandbox from pydantic_ai_lizard",
    DeprecationWarning,
    stacklevel=2,
)
