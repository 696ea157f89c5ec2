"""Pydantic AI's own conformance suite, against sandboxes in lizard-local.

Every rule runs, under asyncio and under trio: the optional fixtures (`fresh_backend`,
`destructive_backend`, `attach_backend`, `destroy_environment`) are all provided. The one
documented skip: lizard-local's sandboxes run commands as root, so when these tests run as root
`test_permission_denied_uses_builtin_error` skips (root bypasses file permissions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite

from pydantic_ai_lizard import LizardSandboxBackend

BackendFactory = Callable[..., LizardSandboxBackend]


async def _destroy(backend: WorkspaceBackend) -> None:
    assert isinstance(backend, LizardSandboxBackend)
    await backend.destroy()


class TestLizardSandboxConformance(WorkspaceBackendSuite):
    # Every rule under both event loops the backend supports.
    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def backend(self, make_backend: BackendFactory) -> WorkspaceBackend:
        return make_backend()

    @pytest.fixture
    def fresh_backend(self, make_backend: BackendFactory) -> Callable[[], WorkspaceBackend]:
        return make_backend

    @pytest.fixture
    def attach_backend(
        self, make_backend: BackendFactory
    ) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        return lambda ref: make_backend(ref=ref)

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        return _destroy
