"""Fixtures for openai-agents-lizard's tests.

``lizard_local`` (session) and ``lizard_counters`` (function) come from lizard-local's pytest
plugin, which points ``LIZARD_API_URL``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID`` at the
emulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.sandbox_session import SandboxSession
from lifecycle import OPTIONS

from lizard_local import LocalServer
from openai_agents_lizard import LizardSandboxClient


@pytest.fixture
def client(lizard_local: LocalServer) -> LizardSandboxClient:
    return LizardSandboxClient()


@pytest.fixture
async def session(client: LizardSandboxClient) -> AsyncIterator[SandboxSession]:
    """A started session on a new sandbox with an empty manifest, deleted afterwards."""
    made = await client.create(manifest=Manifest(), options=OPTIONS)
    try:
        await made.start()
        yield made
    finally:
        await client.delete(made)
