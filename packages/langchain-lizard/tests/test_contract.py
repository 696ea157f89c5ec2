"""The shared adapter contract (``lizard_local.contract``) for ``LizardSandbox``.

The async face is the one under test: cancelling ``aexecute``'s task must stop the command.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import pytest
from deepagents.backends.protocol import ExecuteResponse

from langchain_lizard import LizardSandbox, LizardSandboxError, SandboxUnavailableError
from lizard_local.contract import AdapterContract, ExpectedErrors


def make_backend(**kwargs: Any) -> LizardSandbox:
    return LizardSandbox(lifetime_ms=300_000, **kwargs)


async def run_python(backend: LizardSandbox, code: str) -> ExecuteResponse:
    return await backend.aexecute(f"python3 -c {shlex.quote(code)}")


async def close(backend: LizardSandbox) -> None:
    await backend.aclose()


class TestLizardSandboxContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_backend

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
