"""``LizardSandbox`` in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; creates one short-lived
sandbox and destroys it. Offline runs deselect it (``-m "not live"``).
"""

from __future__ import annotations

from strands.sandbox import ExecutionResult, StreamChunk

from lizard_local.pytest_plugin import LIVE, Cloud
from strands_lizard import LizardSandbox

pytestmark = list(LIVE)


async def test_commands_stream_and_files_travel_in_a_cloud_sandbox(lizard_cloud: Cloud) -> None:
    async with LizardSandbox(
        api_key=lizard_cloud.api_key,
        project_id=lizard_cloud.project_id,
        api_url=lizard_cloud.api_url,
        lifetime_ms=120_000,
    ) as sandbox:
        items = [item async for item in sandbox.execute_streaming("echo a; sleep 0.5; echo b")]
        assert [i.data for i in items if isinstance(i, StreamChunk)] == ["a\n", "b\n"]
        assert items[-1] == ExecutionResult(0, "a\nb\n", "")
        await sandbox.write_text("notes/hello.txt", "hello")
        assert await sandbox.read_text("notes/hello.txt") == "hello"
        assert sandbox.sandbox_id is not None
