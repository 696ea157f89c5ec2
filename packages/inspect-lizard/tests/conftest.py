"""Shared fixtures: Inspect sandbox environments on the session's lizard-local."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment
from lizard_local import LocalServer

# lizard-local serves `base` without the Jupyter stack; nothing here needs more.
CONFIG = LizardSandboxConfig(template="base", lifetime_ms=600_000)


@pytest.fixture(scope="module")
def module_env(lizard_local: LocalServer) -> Iterator[LizardSandboxEnvironment]:
    """One sandbox for a module's tests, created as ``sample_init`` creates it."""
    environments: dict[str, Any] = anyio.run(
        LizardSandboxEnvironment.sample_init, "tests", CONFIG, {}
    )
    environment = environments["default"]
    assert isinstance(environment, LizardSandboxEnvironment)
    try:
        yield environment
    finally:
        anyio.run(LizardSandboxEnvironment.sample_cleanup, "tests", CONFIG, environments, False)
