"""Sandboxes across runs: pause on exit, snapshot persistence, volumes, exposed ports.

Each goes through the SDK's own lifecycle (``client.create`` -> ``start`` -> ``aclose``
(stop + shutdown) -> ``client.delete`` -> ``client.resume``), or its ``Runner``, against
lizard-local.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import httpx
import lifecycle
import lizard
import pytest
from agents import Runner
from agents.sandbox.errors import ExposedPortUnavailableError
from agents.sandbox.manifest import Manifest
from agents.sandbox.snapshot import LocalSnapshotSpec
from scripted_agent import ScriptedModel, call, final, make_agent, run_config, tool_outputs

from lizard_core.config import SandboxConfig
from lizard_core.session import Session
from lizard_core.snapshots import delete_snapshots, find_snapshots
from lizard_core.volumes import delete_volume, get_volume
from lizard_local import LocalServer
from openai_agents_lizard import (
    LizardSandboxClient,
    LizardSandboxClientOptions,
    LizardSandboxSessionState,
)

EXEC = "POST /api/sandboxes/{id}/exec"
PAUSING = LizardSandboxClientOptions(lifetime_ms=300_000, pause_on_exit=True)
SNAPSHOTS = LizardSandboxClientOptions(lifetime_ms=300_000, workspace_persistence="snapshot")


def _status(server: LocalServer, sandbox_id: str) -> str:
    info = lizard.Sandbox(sandbox_id, api_key=server.api_key, api_url=server.url).get_info()
    return str(info.status)


async def _destroy(sandbox_id: str) -> None:
    await Session(SandboxConfig.from_env(), sandbox_id=sandbox_id).adestroy()


def _our_snapshots() -> set[str]:
    config = SandboxConfig.from_env()
    return {r.snapshot_id for r in find_snapshots(config, {"integration": "openai-agents"})}


async def test_pause_on_exit_leaves_the_sandbox_paused_and_resume_resumes_it(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(manifest=Manifest(), options=PAUSING)
    sandbox_id = session.state.sandbox_id  # type: ignore[attr-defined]
    try:
        await session.start()
        await lifecycle.write_text(session, "kept.txt", "across runs\n")
        await session.aclose()  # the runner's end: stop, then shutdown
        await client.delete(session)
        await client.delete(session)  # harmless
        assert _status(lizard_local, sandbox_id) == "paused"
        payload = json.dumps(client.serialize_session_state(session.state))
        assert lizard_local.api_key not in payload

        resumed = await client.resume(client.deserialize_session_state(json.loads(payload)))
        await resumed.start()
        assert resumed.state.sandbox_id == sandbox_id  # type: ignore[attr-defined]
        assert await lifecycle.read_text(resumed, "kept.txt") == "across runs\n"
        assert _status(lizard_local, sandbox_id) == "running"
        await resumed.aclose()
        assert _status(lizard_local, sandbox_id) == "paused"
        await client.destroy(resumed)
        assert sandbox_id not in lizard_local.sandboxes()
        await client.destroy(resumed)  # harmless
    finally:
        await _destroy(sandbox_id)


async def test_resuming_a_live_sandbox_is_one_request_and_its_start_none(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    options = LizardSandboxClientOptions(lifetime_ms=300_000)
    session = await client.create(manifest=Manifest(), options=options)
    try:
        lizard_local.reset_counters()
        await session.start()
        # A fresh start: the root resolved in the sandbox, then made (nothing installed).
        assert lizard_local.counters()["routes"] == {EXEC: 2}
        await lifecycle.write_text(session, "live.txt", "still here\n")
        payload = client.serialize_session_state(session.state)
        lizard_local.reset_counters()
        resumed = await client.resume(client.deserialize_session_state(payload))
        assert lizard_local.counters()["routes"] == {"GET /api/sandboxes/{id}": 1}
        lizard_local.reset_counters()
        await resumed.start()
        assert lizard_local.counters()["total"] == 0
        assert resumed.state.sandbox_id == session.state.sandbox_id  # type: ignore[attr-defined]
        assert await lifecycle.read_text(resumed, "live.txt") == "still here\n"
        assert lizard_local.counters()["routes"] == {EXEC: 1}
    finally:
        await client.delete(session)


async def test_a_runner_run_with_pause_on_exit_is_resumed_by_the_next_run(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    before = set(lizard_local.sandboxes())
    first_model = ScriptedModel(
        [[call("write_file", "c_w", path="note.txt", content="from run one")], [final("ok")]]
    )
    first = await Runner.run(
        make_agent(first_model), "write", run_config=run_config(client, options=PAUSING)
    )
    left = set(lizard_local.sandboxes()) - before
    assert len(left) == 1, "the run's sandbox was not kept"
    (sandbox_id,) = left
    try:
        assert _status(lizard_local, sandbox_id) == "paused"
        session_state = first.to_state().to_json()
        assert lizard_local.api_key not in json.dumps(session_state)

        second_model = ScriptedModel([[call("read_file", "c_r", path="note.txt")], [final("ok")]])
        config = run_config(client, options=PAUSING)
        assert config.sandbox is not None
        state = LizardSandboxSessionState.model_validate(
            {**client.serialize_session_state(_state_of(first)), "sandbox_id": sandbox_id}
        )
        config.sandbox.session_state = state
        second = await Runner.run(make_agent(second_model), "read", run_config=config)
        assert tool_outputs(second.new_items) == ["from run one"]
        assert set(lizard_local.sandboxes()) - before == {sandbox_id}
        assert _status(lizard_local, sandbox_id) == "paused"
    finally:
        await _destroy(sandbox_id)


def _state_of(result: object) -> LizardSandboxSessionState:
    """The sandbox session state the runner keeps in a result's ``RunState``."""
    raw = result.to_state().to_json()  # type: ignore[attr-defined]
    found = json.dumps(raw)
    for candidate in _dicts(raw):
        if candidate.get("type") == "lizard" and "sandbox_id" in candidate:
            return LizardSandboxSessionState.model_validate(candidate)
    raise AssertionError(f"no Lizard session state in the run state: {found[:200]}")


def _dicts(value: object) -> list[dict[str, object]]:
    if isinstance(value, dict):
        return [value, *[d for v in value.values() for d in _dicts(v)]]
    if isinstance(value, list):
        return [d for v in value for d in _dicts(v)]
    return []


async def test_snapshot_persistence_restores_from_a_lizard_snapshot_and_cleans_up(
    client: LizardSandboxClient, lizard_local: LocalServer, tmp_path: Path
) -> None:
    store = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    session = await client.create(snapshot=store, manifest=Manifest(), options=SNAPSHOTS)
    first_id = session.state.sandbox_id  # type: ignore[attr-defined]
    before = _our_snapshots()
    try:
        await session.start()
        await lifecycle.write_text(session, "data/kept.txt", "in the snapshot\n")
        await session.stop()
        first_snapshot = session.state.snapshot_id  # type: ignore[attr-defined]
        assert first_snapshot in _our_snapshots() - before
        await session.stop()  # a newer snapshot replaces (and deletes) the first
        second_snapshot = session.state.snapshot_id  # type: ignore[attr-defined]
        assert _our_snapshots() - before == {second_snapshot}
        await session.shutdown()
    finally:
        await client.delete(session)
    assert first_id not in lizard_local.sandboxes()
    saved = b"".join(p.read_bytes() for p in (tmp_path / "snapshots").iterdir())
    assert saved.startswith(b"LIZARD_SANDBOX_SNAPSHOT_V1\n"), "a tar went through the host"

    payload = client.serialize_session_state(session.state)
    resumed = await client.resume(client.deserialize_session_state(payload))
    try:
        lizard_local.reset_counters()
        await resumed.start()
        assert "POST /api/sandboxes" not in lizard_local.counters()["routes"]
        assert await lifecycle.read_text(resumed, "data/kept.txt") == "in the snapshot\n"
    finally:
        await client.delete(resumed)
    # The latest snapshot outlives the session (a saved state may hydrate from it again).
    config = SandboxConfig.from_env()
    assert delete_snapshots(config, [second_snapshot]) == [second_snapshot]


async def test_a_volume_is_mounted_at_the_workspace_and_outlives_the_session(
    client: LizardSandboxClient,
) -> None:
    name = f"oa-vol-{int(time.time() * 1000) % 10**9}"
    options = LizardSandboxClientOptions(lifetime_ms=300_000, volume=name)
    config = SandboxConfig.from_env()
    try:
        session = await client.create(manifest=Manifest(), options=options)
        try:
            await session.start()
            await lifecycle.write_text(session, "on-volume.txt", "durable\n")
        finally:
            await client.delete(session)
        assert get_volume(config, name) is not None
        again = await client.create(manifest=Manifest(), options=options)
        try:
            await again.start()
            assert await lifecycle.read_text(again, "on-volume.txt") == "durable\n"
        finally:
            await client.delete(again)
    finally:
        delete_volume(config, name)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_an_exposed_port_is_reached_with_its_token_which_is_never_logged(
    client: LizardSandboxClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = _free_port()
    options = LizardSandboxClientOptions(lifetime_ms=300_000, exposed_ports=(port,))
    session = await client.create(manifest=Manifest(), options=options)
    try:
        await session.start()
        await session.exec(
            f"mkdir -p /tmp/www && echo hi > /tmp/www/index.html && cd /tmp/www && "
            f"(python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &)"
        )
        endpoint = await session.resolve_exposed_port(port)
        token = endpoint.query.removeprefix("lizard_token=")
        assert token
        assert token not in repr(endpoint)
        url = endpoint.url_for("http")
        assert token in url
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 10
            while (res := await http.get(url)).status_code == 502:
                assert time.monotonic() < deadline
            assert res.status_code == 200
            assert res.text == "hi\n"
        async with httpx.AsyncClient() as fresh:  # no cookie from the token above
            assert (await fresh.get(url.split("?")[0])).status_code == 401
        with pytest.raises(ExposedPortUnavailableError):
            await session.resolve_exposed_port(port + 1 if port < 65535 else port - 1)
        assert token not in json.dumps(client.serialize_session_state(session.state))
    finally:
        await client.delete(session)
    # Every log line but the test's own HTTP client's (which logs the URL it was given).
    ours = [r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert ours
    assert not [line for line in ours if token in line]
