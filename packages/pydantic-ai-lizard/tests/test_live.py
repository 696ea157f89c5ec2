"""The conformance suite and an agent run against the Lizard cloud.

Runs only with LIZARD_LIVE_TESTS=1 and LIZARD_API_KEY / LIZARD_PROJECT_ID set (`nox -s live`); it
creates billed sandboxes and destroys every one. The account comes from lizard-local's pytest
plugin (``lizard_cloud``) and is passed to each backend explicitly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite

from lizard_local.pytest_plugin import LIVE, Cloud
from pydantic_ai_lizard import LizardSandboxBackend

pytestmark = [*LIVE, pytest.mark.enable_socket]

# Short-lived on purpose: a lost connection cannot leave a sandbox billing for long.
_LIFETIME_MS = 900_000


@pytest.fixture(scope="module")
def cloud_backends(lizard_cloud: Cloud) -> Iterator[Callable[..., LizardSandboxBackend]]:
    created: list[LizardSandboxBackend] = []

    def make(**kwargs: Any) -> LizardSandboxBackend:
        backend = LizardSandboxBackend(
            lifetime_ms=_LIFETIME_MS,
            api_key=lizard_cloud.api_key,
            project_id=lizard_cloud.project_id,
            api_url=lizard_cloud.api_url,
            **kwargs,
        )
        created.append(backend)
        return backend

    yield make
    for backend in created:
        anyio.run(backend.destroy)


async def _destroy(backend: WorkspaceBackend) -> None:
    assert isinstance(backend, LizardSandboxBackend)
    await backend.destroy()


class TestLizardCloudConformance(WorkspaceBackendSuite):
    # One shared sandbox for the plain rules; the lifecycle rules get their own.
    @pytest.fixture(scope="class")
    def shared_backend(
        self, cloud_backends: Callable[..., LizardSandboxBackend]
    ) -> LizardSandboxBackend:
        return cloud_backends()

    @pytest.fixture
    def backend(self, shared_backend: LizardSandboxBackend) -> WorkspaceBackend:
        return shared_backend

    @pytest.fixture
    def fresh_backend(
        self, cloud_backends: Callable[..., LizardSandboxBackend]
    ) -> Callable[[], WorkspaceBackend]:
        return cloud_backends

    @pytest.fixture
    def attach_backend(
        self, cloud_backends: Callable[..., LizardSandboxBackend]
    ) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        return lambda ref: cloud_backends(ref=ref)

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        return _destroy


async def test_commands_and_files_in_a_cloud_sandbox(
    cloud_backends: Callable[..., LizardSandboxBackend],
) -> None:
    backend = cloud_backends()
    await backend.working_dir()
    result = await backend.run(["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out", "err")
    assert await backend.realpath(await backend.working_dir()) == await backend.working_dir()
