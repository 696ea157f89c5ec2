"""Fixtures for langchain-lizard's tests.

``lizard_local`` (session) and ``lizard_counters`` (function) come from lizard-local's pytest
plugin, which points ``LIZARD_API_URL``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID`` at the
emulator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from langchain_lizard import LizardSandbox
from lizard_local import LocalServer


@pytest.fixture
def backend(lizard_local: LocalServer) -> Iterator[LizardSandbox]:
    """A backend on a new sandbox, destroyed afterwards."""
    with LizardSandbox(lifetime_ms=300_000) as made:
        yield made


@pytest.fixture
async def abackend(lizard_local: LocalServer) -> AsyncIterator[LizardSandbox]:
    """The same, made and closed with the async face."""
    async with LizardSandbox(lifetime_ms=300_000) as made:
        yield made
