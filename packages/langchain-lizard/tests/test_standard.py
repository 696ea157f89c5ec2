"""LangChain's standard sandbox suite (``SandboxIntegrationTests``) against lizard-local.

On deepagents 0.7 seven of its tests are strict expected failures; ``standard_suite.py`` says why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from standard_suite import LizardStandardSuite

from langchain_lizard import LizardSandbox
from lizard_local import LocalServer


class TestLizardSandboxStandard(LizardStandardSuite):
    @pytest.fixture(scope="class")
    def sandbox(self, lizard_local: LocalServer) -> Iterator[SandboxBackendProtocol]:
        with LizardSandbox(lifetime_ms=600_000) as backend:
            yield backend
