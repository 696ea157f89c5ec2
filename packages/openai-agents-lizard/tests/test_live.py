"""``LizardTool`` in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; creates one short-lived
sandbox and destroys it. Offline runs deselect it (``-m "not live"``).
"""

from __future__ import annotations

from lizard_local.pytest_plugin import LIVE, Cloud
from openai_agents_lizard import CommandOutput, LizardTool

pytestmark = list(LIVE)


def test_a_command_runs_in_a_cloud_sandbox(lizard_cloud: Cloud) -> None:
    tool = LizardTool(
        api_key=lizard_cloud.api_key,
        project_id=lizard_cloud.project_id,
        api_url=lizard_cloud.api_url,
        lifetime_ms=120_000,
    )
    with tool:
        assert tool.run("echo hello") == CommandOutput(0, "hello\n", "")
        sandbox_id = tool.sandbox_id
    assert sandbox_id is not None
