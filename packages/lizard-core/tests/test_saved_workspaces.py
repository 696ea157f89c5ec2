"""``lizard_core.saved_workspaces``: a workspace saved as a tar or a snapshot, then restored."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from lizard_core.commands import arun_command
from lizard_core.config import SandboxConfig
from lizard_core.saved_workspaces import (
    areplace_from_snapshot,
    arestore_workspace,
    asave_workspace,
)
from lizard_core.session import Session
from lizard_core.snapshots import afind_snapshots, decode_reference, delete_snapshots
from lizard_local import LocalServer

# Each test's own folders in the sandbox.
BASE = f"/tmp/saved-{uuid.uuid4().hex[:8]}"
WS, ELSEWHERE = f"{BASE}/ws", f"{BASE}/elsewhere"
FILES = f"mkdir -p {WS}/sub {WS}/skip && echo one > {WS}/a && echo two > {WS}/sub/b"


@pytest.fixture
async def session(sandbox_config: SandboxConfig) -> AsyncIterator[Session]:
    made = Session(sandbox_config)
    try:
        await arun_command(made, ["sh", "-c", FILES + f" && echo no > {WS}/skip/c"])
        yield made
    finally:
        await made.adestroy()


async def listing(session: Session, directory: str) -> bytes:
    done = await arun_command(session, ["sh", "-c", f"cd {directory} && find . -type f | sort"])
    return done.stdout


async def test_a_tar_save_restores_into_another_sandbox_without_what_was_left_out(
    session: Session, sandbox_config: SandboxConfig
) -> None:
    saved, snapshot_id = await asave_workspace(session, WS, exclude=["skip"])
    assert snapshot_id is None
    async with Session(sandbox_config) as other:
        assert await arestore_workspace(other, ELSEWHERE, saved) is None
        assert await listing(other, ELSEWHERE) == b"./a\n./sub/b\n"


async def test_a_snapshot_save_moves_no_files_and_replaces_the_earlier_one(
    session: Session, sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    first, first_id = await asave_workspace(session, WS, snapshot=True, label="t")
    assert first_id is not None
    assert decode_reference(first.read()) == first_id
    second, second_id = await asave_workspace(
        session, WS, snapshot=True, label="t", replaces=first_id
    )
    try:
        ours = {r.snapshot_id for r in await afind_snapshots(sandbox_config, {})}
        assert second_id in ours
        assert first_id not in ours  # the earlier save is deleted
        old_id = session.sandbox_id
        async with Session(sandbox_config) as target:
            restored = await arestore_workspace(target, WS, second)
            assert restored == second_id
            unpacked = await arun_command(target, ["test", "-e", BASE])
            assert unpacked.exit_code == 1  # a reference unpacks nothing
            replaced = await areplace_from_snapshot(target, restored)
            try:
                assert target.destroyed
                assert await listing(replaced, WS) == b"./a\n./skip/c\n./sub/b\n"
            finally:
                await replaced.adestroy()
        assert old_id in lizard_local.sandboxes()  # only the replaced session's sandbox went
    finally:
        delete_snapshots(sandbox_config, [second_id])


async def test_a_snapshot_cannot_leave_paths_out(
    session: Session, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(ValueError, match="needs a tar"):
        await asave_workspace(session, WS, snapshot=True, exclude=["skip"])
    assert lizard_counters.counters()["total"] == 0
