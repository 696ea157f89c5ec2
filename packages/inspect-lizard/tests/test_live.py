"""Inspect's self-check and an eval in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; creates short-lived
sandboxes and destroys them. Offline runs deselect these (``-m "not live"``).
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
from inspect_ai.util._sandbox.self_check import *  # noqa: F403

from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment
from lizard_local.pytest_plugin import LIVE, Cloud

pytestmark = list(LIVE)

ROOT_IGNORES_MODE_BITS = "the sandbox user is root, which mode bits do not restrict"
EXPECTED_FAILURES = {
    "test_read_file_not_allowed": ROOT_IGNORES_MODE_BITS,
    "test_write_text_file_without_permissions": ROOT_IGNORES_MODE_BITS,
    "test_write_binary_file_without_permissions": ROOT_IGNORES_MODE_BITS,
}


@pytest.fixture(scope="module")
def cloud_env(lizard_cloud: Cloud) -> Iterator[LizardSandboxEnvironment]:
    # Inspect builds environments from the LIZARD_* variables, as an eval would.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LIZARD_API_KEY", lizard_cloud.api_key)
        patch.setenv("LIZARD_PROJECT_ID", lizard_cloud.project_id)
        patch.setenv("LIZARD_API_URL", lizard_cloud.api_url)
        config = LizardSandboxConfig(lifetime_ms=600_000)
        environments = anyio.run(LizardSandboxEnvironment.sample_init, "live", config, {})
        try:
            yield environments["default"]
        finally:
            anyio.run(LizardSandboxEnvironment.sample_cleanup, "live", config, environments, False)


@pytest.fixture
def sandbox_env(
    request: pytest.FixtureRequest, cloud_env: LizardSandboxEnvironment
) -> LizardSandboxEnvironment:
    reason = EXPECTED_FAILURES.get(request.node.originalname)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    return cloud_env
