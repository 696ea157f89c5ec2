"""``LizardSandboxClient`` in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; creates short-lived
sandboxes and destroys them. Offline runs deselect it (``-m "not live"``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from agents.sandbox.manifest import Manifest

from lizard_local.pytest_plugin import LIVE, Cloud
from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

pytestmark = list(LIVE)


async def test_a_session_runs_persists_and_resumes_in_the_cloud(lizard_cloud: Cloud) -> None:
    client = LizardSandboxClient(
        api_key=lizard_cloud.api_key,
        project_id=lizard_cloud.project_id,
        api_url=lizard_cloud.api_url,
    )
    options = LizardSandboxClientOptions(lifetime_ms=120_000)
    session = await client.create(manifest=Manifest(), options=options)
    try:
        await session.start()
        assert (await session.exec("echo", "hello", shell=False)).stdout == b"hello\n"
        await session.write(Path("note.txt"), io.BytesIO(b"kept"))
        archive = await session.persist_workspace()
        payload = json.dumps(client.serialize_session_state(session.state))
        assert lizard_cloud.api_key not in payload
    finally:
        await client.delete(session)
    resumed = await client.resume(client.deserialize_session_state(json.loads(payload)))
    try:
        await resumed.start()
        await resumed.hydrate_workspace(archive)
        assert (await resumed.read(Path("note.txt"))).read() == b"kept"
    finally:
        await client.delete(resumed)
