from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandboxBackend


@pytest.fixture
def anyio_backend() -> str:
    # Sandboxes of the conformance suite run under asyncio, like Pydantic AI agents do.
    return "asyncio"


def destroy_now(backend: LizardSandboxBackend) -> None:
    """Destroy a backend's sandbox from synchronous code (fixture teardown)."""
    anyio.run(backend.destroy)


@pytest.fixture
def make_backend(lizard_local: LocalServer) -> Iterator[Callable[..., LizardSandboxBackend]]:
    """Build backends against lizard-local; every sandbox they create is destroyed afterwards."""
    created: list[LizardSandboxBackend] = []

    def make(**kwargs: Any) -> LizardSandboxBackend:
        backend = LizardSandboxBackend(**kwargs)
        created.append(backend)
        return backend

    yield make
    for backend in created:
        destroy_now(backend)
