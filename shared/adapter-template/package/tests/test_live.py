"""``LizardTool`` in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; creates one short-lived
sandbox and destroys it. Offline runs deselect it (``-m "not live"``).
"""

from __future__ import annotations

import os

import pytest

from __MODULE__ import CommandOutput, LizardTool

# Read at import, before lizard-local's plugin points LIZARD_* at the emulator for the session.
CREDENTIALS = {
    name: os.environ.get(name, "")
    for name in ("LIZARD_API_KEY", "LIZARD_PROJECT_ID", "LIZARD_API_URL")
}
ENABLED = os.environ.get("LIZARD_LIVE_TESTS") == "1" and bool(
    CREDENTIALS["LIZARD_API_KEY"] and CREDENTIALS["LIZARD_PROJECT_ID"]
)

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not ENABLED, reason="set LIZARD_LIVE_TESTS=1, LIZARD_API_KEY and LIZARD_PROJECT_ID"
    ),
]


def test_a_command_runs_in_a_cloud_sandbox() -> None:
    tool = LizardTool(
        api_key=CREDENTIALS["LIZARD_API_KEY"],
        project_id=CREDENTIALS["LIZARD_PROJECT_ID"],
        api_url=CREDENTIALS["LIZARD_API_URL"] or None,
        lifetime_ms=120_000,
    )
    with tool:
        assert tool.run("echo hello") == CommandOutput(0, "hello\n", "")
        sandbox_id = tool.sandbox_id
    assert sandbox_id is not None
