"""The shared adapter contract (``lizard_local.contract``) for ``LizardTool``.

The async face is the one under test: cancelling ``arun``'s task must stop the command. A tool
for a blocking framework passes ``run`` and ``close`` instead (Ctrl-C is then the cancellation).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import pytest

from lizard_local.contract import AdapterContract, ExpectedErrors
from openai_agents_lizard import CommandOutput, LizardTool
from openai_agents_lizard._errors import LizardToolError, SandboxUnavailableError


def make_tool(**kwargs: Any) -> LizardTool:
    return LizardTool(lifetime_ms=300_000, **kwargs)


async def run_python(tool: LizardTool, code: str) -> CommandOutput:
    return await tool.arun(f"python3 -c {shlex.quote(code)}")


async def close(tool: LizardTool) -> None:
    await tool.aclose()


class TestLizardToolContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_tool

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return close

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ExpectedErrors(
            sandbox_gone=SandboxUnavailableError,
            credentials_rejected=SandboxUnavailableError,
            transient=LizardToolError,
        )
