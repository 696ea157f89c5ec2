"""Fixtures for strands-lizard's tests.

``lizard_local`` (session) comes from lizard-local's pytest plugin, which points
``LIZARD_API_URL``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID`` at the emulator.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lizard_local import LocalServer
from strands_lizard import LizardSandbox

EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
POST_FILE = "POST /api/sandboxes/{id}/files"
CREATE = "POST /api/sandboxes"


class Requests:
    """lizard-local's request counters, per route, since the last :meth:`reset`."""

    def __init__(self, server: LocalServer) -> None:
        self.server = server
        server.reset_counters()

    def reset(self) -> None:
        self.server.reset_counters()

    def counts(self) -> dict[str, int]:
        return {route: n for route, n in self.server.counters()["routes"].items() if n}


@pytest.fixture
def requests(lizard_local: LocalServer) -> Requests:
    """Counts the API requests a test makes (reset at its start and by ``reset()``)."""
    return Requests(lizard_local)


@pytest.fixture(scope="module")
def shared(lizard_local: LocalServer) -> Iterator[LizardSandbox]:
    """One sandbox for a module's tests (each works under its own ``scratch`` directory)."""
    sandbox = LizardSandbox(lifetime_ms=900_000)
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def scratch() -> str:
    """A fresh absolute directory name (not created)."""
    return f"/tmp/strands-lizard-{uuid.uuid4().hex[:12]}"
