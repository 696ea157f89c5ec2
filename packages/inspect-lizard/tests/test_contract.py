"""The shared adapter contract (``lizard_local.contract``) for ``LizardSandboxEnvironment``.

The adapter is the environment Inspect gets from ``sample_init``; its cleanup is
``sample_cleanup``, the path Inspect takes; cancelling an ``exec`` task must stop the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from inspect_ai.util import ExecResult, SandboxUnavailableError

from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment, LizardSandboxError
from lizard_local.contract import AdapterContract, ExpectedErrors


def make_environment(project_id: str | None = None, **kwargs: Any) -> LizardSandboxEnvironment:
    config = LizardSandboxConfig(template="base", lifetime_ms=300_000, project_id=project_id)
    return LizardSandboxEnvironment(config, **kwargs)


async def run_python(environment: LizardSandboxEnvironment, code: str) -> ExecResult[str]:
    return await environment.exec(["python3", "-c", code])


async def cleanup(environment: LizardSandboxEnvironment) -> None:
    await LizardSandboxEnvironment.sample_cleanup(
        "contract", environment.config, {"default": environment}, False
    )


class TestLizardSandboxEnvironmentContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_environment

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return cleanup

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ExpectedErrors(
            sandbox_gone=SandboxUnavailableError,
            credentials_rejected=LizardSandboxError,
            transient=LizardSandboxError,
        )
