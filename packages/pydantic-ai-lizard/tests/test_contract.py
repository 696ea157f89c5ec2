"""The shared adapter contract (``lizard_local.contract``) for ``LizardSandboxBackend``.

Each rule runs on lizard-local: the key never reaches the sandbox, ``destroy()`` leaves nothing,
a cancelled ``run()`` stops its process group and keeps the backend usable, and failures map to
what Pydantic AI's workspace protocol promises: a sandbox that is gone or a rejected key are
``WorkspaceUnavailableError``; a transient failure propagates as lizard_core's
``TransientError``, so that durable engines can retry it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.workspaces import CommandResult, WorkspaceUnavailableError

from lizard_core.errors import TransientError
from lizard_local.contract import AdapterContract, ExpectedErrors
from pydantic_ai_lizard import LizardSandboxBackend


def make_backend(**kwargs: Any) -> LizardSandboxBackend:
    return LizardSandboxBackend(lifetime_ms=300_000, **kwargs)


async def run_python(backend: LizardSandboxBackend, code: str) -> CommandResult:
    return await backend.run(["python3", "-c", code])


async def destroy(backend: LizardSandboxBackend) -> None:
    await backend.destroy()


class TestLizardSandboxBackendContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return make_backend

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return destroy

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ExpectedErrors(
            sandbox_gone=WorkspaceUnavailableError,
            credentials_rejected=WorkspaceUnavailableError,
            transient=TransientError,
        )
