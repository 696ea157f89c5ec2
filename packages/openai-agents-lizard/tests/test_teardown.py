"""Ends of a session that go wrong: deleted twice or unstarted, a failed pause, a gone sandbox,
a cancelled start, a deleted snapshot, a rejected key, PTY processes left running."""

from __future__ import annotations

import asyncio
import logging
import traceback
from pathlib import Path
from typing import Any

import lifecycle
import pytest
from agents.sandbox.entries import File
from agents.sandbox.errors import WorkspaceStopError
from agents.sandbox.manifest import Manifest
from agents.sandbox.session import pty_types
from agents.sandbox.snapshot import LocalSnapshotSpec
from lifecycle import OPTIONS

from lizard_core.config import SandboxConfig
from lizard_core.snapshots import delete_snapshots
from lizard_local import LocalServer
from lizard_local.contract import pids_carrying
from openai_agents_lizard import (
    LizardSandboxClient,
    LizardSandboxClientOptions,
    SandboxCreateError,
)

PAUSING = LizardSandboxClientOptions(lifetime_ms=300_000, pause_on_exit=True)
SNAPSHOTS = LizardSandboxClientOptions(lifetime_ms=300_000, workspace_persistence="snapshot")
PAUSE = "POST /api/sandboxes/{id}/pause"
EXEC = "POST /api/sandboxes/{id}/exec"


def _everything_said(error: BaseException | None) -> str:
    """Every text an error and its causes show."""
    shown = []
    while error is not None:
        shown += [repr(error.args), repr(getattr(error, "context", None))]
        shown.append("".join(traceback.format_exception(error)))
        error = error.__cause__ or error.__context__
    return "\n".join(shown)


async def test_an_unstarted_session_is_deleted_and_a_second_delete_is_harmless(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(options=OPTIONS)
    sandbox_id = session.state.sandbox_id  # type: ignore[attr-defined]
    await client.delete(session)
    assert sandbox_id not in lizard_local.sandboxes()
    lizard_local.reset_counters()
    await client.delete(session)
    assert lizard_local.counters()["total"] == 0


async def test_a_pause_that_fails_destroys_the_sandbox(
    client: LizardSandboxClient, lizard_local: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session = await client.create(options=PAUSING)
    sandbox_id = session.state.sandbox_id  # type: ignore[attr-defined]
    await session.start()
    lizard_local.reset_counters()
    lizard_local.inject_fault(PAUSE, status=500, count=3)  # every retry of the pause fails
    with pytest.raises(WorkspaceStopError) as caught:
        await session.aclose()
    assert lizard_local.counters()["routes"][PAUSE] == 3
    assert sandbox_id not in lizard_local.sandboxes()  # not left running, billing
    await client.delete(session)  # harmless
    said = _everything_said(caught.value) + caplog.text
    assert lizard_local.api_key not in said


async def test_pause_on_exit_of_a_sandbox_already_gone_ends_quietly(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(options=PAUSING)
    sandbox_id = session.state.sandbox_id  # type: ignore[attr-defined]
    await session.start()
    lizard_local.expire(sandbox_id)
    await session.aclose()
    await client.delete(session)
    assert sandbox_id not in lizard_local.sandboxes()


async def test_a_cancelled_start_and_its_delete_leave_no_sandbox(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    before = set(lizard_local.sandboxes())
    files = {f"f{index}.txt": File(content=b"x" * 1000) for index in range(200)}
    session = await client.create(manifest=Manifest(entries=files), options=OPTIONS)
    start = asyncio.create_task(session.start())
    await asyncio.sleep(1.0)  # the manifest is being written
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    await client.delete(session)
    assert set(lizard_local.sandboxes()) == before


async def test_resume_from_a_deleted_lizard_snapshot_is_a_clear_error_and_leaves_nothing(
    client: LizardSandboxClient, lizard_local: LocalServer, tmp_path: Path
) -> None:
    store = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    session = await client.create(snapshot=store, manifest=Manifest(), options=SNAPSHOTS)
    await session.start()
    await lifecycle.write_text(session, "kept.txt", "saved\n")
    await session.aclose()
    await client.delete(session)
    snapshot_id = session.state.snapshot_id  # type: ignore[attr-defined]
    assert delete_snapshots(SandboxConfig.from_env(), [snapshot_id]) == [snapshot_id]
    before = set(lizard_local.sandboxes())
    payload = client.serialize_session_state(session.state)
    with pytest.raises(SandboxCreateError) as caught:
        await client.resume(client.deserialize_session_state(payload))
    assert snapshot_id in str(caught.value)
    assert set(lizard_local.sandboxes()) == before


async def test_a_rejected_key_is_in_no_error_or_log(
    lizard_local: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "lz_rejected_0123456789abcdef"
    client = LizardSandboxClient(api_key=secret)
    with pytest.raises(SandboxCreateError) as caught:
        await client.create(options=OPTIONS)
    assert caught.value.context["retryable"] is False
    said = _everything_said(caught.value) + caplog.text + repr(client) + str(client)
    assert secret not in said


async def test_stop_ends_every_pty_process_and_its_daemon(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    token = "pty-left-running-5d1e"
    session = await client.create(options=OPTIONS)
    try:
        await session.start()
        # More output than anyone reads, and a process that holds the output pipe open.
        chatty = await session.pty_exec_start(f"yes {token}", yield_time_s=1)
        held = await session.pty_exec_start(
            f"setsid sleep 20 & sleep 600 # {token}", yield_time_s=0.5
        )
        assert chatty.process_id is not None
        assert held.process_id is not None
        assert pids_carrying(token)
        await session.stop()
        for _ in range(50):  # a daemon sees its stop within a second
            if not pids_carrying(token):  # (the detached `sleep 20` does not carry it)
                break
            await asyncio.sleep(0.1)
        assert not pids_carrying(token)
    finally:
        await client.delete(session)


async def test_a_pty_process_whose_end_fails_does_not_stop_the_delete(
    client: LizardSandboxClient, lizard_local: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    token = "pty-end-fails-7c2a"
    session = await client.create(options=OPTIONS)
    await session.start()
    sandbox_id = session.state.sandbox_id  # type: ignore[attr-defined]
    kept = await session.pty_exec_start(f"sleep 600 # {token}", yield_time_s=0.25)
    assert kept.process_id is not None
    lizard_local.inject_fault(EXEC, status=503, count=1)  # its end fails, transiently
    await client.delete(session)  # best effort, as the SDK's backends: the delete goes on
    assert "could not end" in caplog.text
    assert sandbox_id not in lizard_local.sandboxes()  # destroyed, the process with it
    assert not pids_carrying(token)


async def test_a_zero_yield_time_is_the_sdks_shortest_wait_not_the_default(
    client: LizardSandboxClient, lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await client.create(options=OPTIONS)
    try:
        await session.start()
        table = session._inner._ptys  # type: ignore[attr-defined]
        waits: list[float] = []
        start, feed = table.astart, table.afeed

        async def recorded_start(*args: Any, wait: float, **kwargs: Any) -> Any:
            waits.append(wait)
            return await start(*args, wait=wait, **kwargs)

        async def recorded_feed(*args: Any, wait: float, **kwargs: Any) -> Any:
            waits.append(wait)
            return await feed(*args, wait=wait, **kwargs)

        monkeypatch.setattr(table, "astart", recorded_start)
        monkeypatch.setattr(table, "afeed", recorded_feed)
        started = await session.pty_exec_start("cat", yield_time_s=0)
        assert started.process_id is not None
        await session.pty_write_stdin(session_id=started.process_id, chars="x\n", yield_time_s=0)
        shortest = pty_types.PTY_YIELD_TIME_MS_MIN / 1000
        assert waits == [shortest, shortest]
    finally:
        await client.delete(session)
