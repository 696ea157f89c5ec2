"""The shared adapter contract (``lizard_local.contract``) for ``LizardSandboxClient``.

The adapter is a client and the session it creates on first use, driven the way the SDK's
runner drives them: ``create`` then ``start`` on first use, ``exec`` for each step, and
``delete`` as the cleanup. Cancelling an ``exec`` task must stop the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agents.sandbox.errors import ExecTransportError
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.types import ExecResult

from lizard_local.contract import AdapterContract, ExpectedErrors
from openai_agents_lizard import (
    LizardSandboxClient,
    LizardSandboxClientOptions,
    SandboxCreateError,
)


class ClientAndSession:
    """A client and the one session it creates on first use."""

    def __init__(self, **kwargs: Any) -> None:
        self.client = LizardSandboxClient(**kwargs)
        self.session: SandboxSession | None = None

    def __repr__(self) -> str:
        return f"ClientAndSession({self.client!r})"


async def run_python(adapter: ClientAndSession, code: str) -> ExecResult:
    if adapter.session is None:
        options = LizardSandboxClientOptions(lifetime_ms=300_000)
        adapter.session = await adapter.client.create(options=options)
        await adapter.session.start()
    return await adapter.session.exec("python3", "-c", code, shell=False)


async def delete(adapter: ClientAndSession) -> None:
    if adapter.session is not None:
        await adapter.client.delete(adapter.session)


class TestLizardSandboxClientContract(AdapterContract):
    @pytest.fixture
    def make_adapter(self) -> Callable[..., Any]:
        return ClientAndSession

    @pytest.fixture
    def run_python(self) -> Callable[[Any, str], object]:
        return run_python

    @pytest.fixture
    def cleanup_adapter(self) -> Callable[[Any], object]:
        return delete

    @pytest.fixture
    def expected_errors(self) -> ExpectedErrors:
        return ExpectedErrors(
            sandbox_gone=ExecTransportError,
            credentials_rejected=(SandboxCreateError, ExecTransportError),
            transient=ExecTransportError,
        )
