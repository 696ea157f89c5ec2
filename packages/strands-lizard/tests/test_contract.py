"""The shared adapter contract (``lizard_local.contract``) for ``LizardSandbox``.

The async face is the one under test: cancelling the task that consumes
``execute_streaming`` must stop the command.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import pytest
from strands.sandbox import ExecutionResult

from lizard_local.contract import AdapterContract, ExpectedErrors
from strands_lizard import LizardSandbox, LizardSandboxError, SandboxUnavailableError


def make_sandbox(**kwargs: Any) -> LizardSandbox:
    return LizardSandbox(lifetime_ms=300_000, **kwargs)


async def run_python(sandbox: LizardSandbox, code: str) -> ExecutionResult:
    async for item in sandbox.execute_streaming(f"python3 -c {shlex.quote(code)}"):
        if isinstance(item, ExecutionResult):
            return item
    raise AssertionError("no ExecutionResult")


async def close(sandbox: LizardSandbox) -> None:
    await sandbox.aclose()


class TestLizardSandboxContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_sandbox

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
            transient=LizardSandboxError,
        )
