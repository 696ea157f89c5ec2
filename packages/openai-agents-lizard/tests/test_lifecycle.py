"""The SDK's sandbox lifecycle on a Lizard session (``lifecycle.py``), through its own methods."""

from __future__ import annotations

import json
from pathlib import Path

import lifecycle
import pytest
from agents.sandbox.entries import InContainerMountStrategy, RcloneMountPattern, S3Mount
from agents.sandbox.errors import MountToolMissingError
from agents.sandbox.manifest import Manifest
from agents.sandbox.snapshot import LocalSnapshotSpec
from lifecycle import OPTIONS

from lizard_local import LocalServer
from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

GIT_OPTIONS = LizardSandboxClientOptions(lifetime_ms=300_000, envs=lifecycle.GIT_ENVS)


async def test_persist_delete_and_resume_finds_every_file(
    client: LizardSandboxClient, lizard_local: LocalServer, tmp_path: Path
) -> None:
    manifest = lifecycle.manifest_with_every_entry_type(lifecycle.make_local_sources(tmp_path))
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    session = await client.create(snapshot=snapshot, manifest=manifest, options=GIT_OPTIONS)
    first_id = session.state.sandbox_id  # type: ignore[attr-defined]
    try:
        await lifecycle.make_fixture_repo(session)
        await session.start()
        await lifecycle.assert_texts(session, {**lifecycle.DURABLE, **lifecycle.EPHEMERAL})
        await lifecycle.write_text(session, "runtime_note.txt", "runtime note v1\n")
        assert await session.apply_patch(lifecycle.patch_operations()) == "Done!"
        await lifecycle.assert_patched(session)
        await lifecycle.assert_escapes_blocked(session)
        await session.extract("bundle.tar", lifecycle.tar_of(lifecycle.ARCHIVE))
        await lifecycle.assert_texts(session, lifecycle.ARCHIVE)

        payload = json.dumps(client.serialize_session_state(session.state))
        assert lizard_local.api_key not in payload
        assert "LIZARD_API_KEY" not in payload
        await session.aclose()  # stop persists the workspace, shutdown destroys the sandbox
    finally:
        await client.delete(session)
        await client.delete(session)  # harmless
    assert first_id not in lizard_local.sandboxes()
    assert any((tmp_path / "snapshots").iterdir()), "stop() persisted no snapshot"

    state = client.deserialize_session_state(json.loads(payload))
    resumed = await client.resume(state)
    try:
        assert resumed.state.sandbox_id != first_id  # type: ignore[attr-defined]
        await resumed.start()
        await lifecycle.assert_restored(resumed)
    finally:
        await client.delete(resumed)


async def test_resume_reattaches_a_sandbox_that_lives(
    client: LizardSandboxClient, lizard_counters: LocalServer
) -> None:
    session = await client.create(manifest=Manifest(), options=OPTIONS)
    try:
        await session.start()
        await lifecycle.write_text(session, "kept.txt", "still here\n")
        payload = client.serialize_session_state(session.state)
        lizard_counters.reset_counters()
        resumed = await client.resume(client.deserialize_session_state(payload))
        await resumed.start()
        assert resumed.state.sandbox_id == session.state.sandbox_id  # type: ignore[attr-defined]
        assert await lifecycle.read_text(resumed, "kept.txt") == "still here\n"
        assert "POST /api/sandboxes" not in lizard_counters.counters()["routes"]
        assert await resumed.running()
    finally:
        await client.delete(session)
    assert not await resumed.running()
    assert session.state.sandbox_id not in lizard_counters.sandboxes()  # type: ignore[attr-defined]


async def test_a_cloud_mount_without_its_tool_fails_naming_the_entry(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    mount = S3Mount(
        bucket="bucket",
        mount_strategy=InContainerMountStrategy(pattern=RcloneMountPattern()),
    )
    manifest = Manifest(entries={"mounts/s3": mount})
    session = await client.create(manifest=manifest, options=OPTIONS)
    try:
        with pytest.raises(MountToolMissingError) as caught:
            await session.start()
        assert caught.value.context["tool"] == "rclone"
        assert caught.value.context["type"] == "s3_mount"
    finally:
        await client.delete(session)
