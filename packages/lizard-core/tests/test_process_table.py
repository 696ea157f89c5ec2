"""``lizard_core.process_table``: interactive processes kept by number, bounded."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from lizard_core.config import SandboxConfig
from lizard_core.errors import TransientError
from lizard_core.process_table import ProcessTable
from lizard_core.session import Session
from lizard_local import LocalServer
from lizard_local.contract import pids_carrying

EXEC = "POST /api/sandboxes/{id}/exec"


def sleeper(token: str) -> list[str]:
    return ["sh", "-c", f"sleep 600 # {token}"]


async def gone(token: str) -> bool:
    for _ in range(100):
        if not pids_carrying(token):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_kept_process_is_numbered_fed_and_read_one_request_per_call(
    module_session: Any, lizard_counters: LocalServer
) -> None:
    table = ProcessTable(first_id=500)
    lizard_counters.reset_counters()
    process_id, first = await table.astart(
        module_session, ["sh", "-c", "echo ready; read line; echo got:$line; exit 5"], wait=0.5
    )
    assert (process_id, first.output, first.exit_code) == (500, b"ready\n", None)
    assert process_id in table
    assert len(table) == 1
    update = await table.afeed(500, b"hi\n", wait=2)
    assert (update.output, update.exit_code) == (b"got:hi\n", 5)
    assert lizard_counters.counters()["routes"] == {EXEC: 2}
    assert 500 not in table  # seen ended: dropped
    with pytest.raises(KeyError):
        await table.afeed(500, b"", wait=0)


async def test_a_process_that_ended_within_its_start_is_not_kept(module_session: Any) -> None:
    table = ProcessTable()
    process_id, update = await table.astart(module_session, ["sh", "-c", "echo bye"], wait=5)
    assert (process_id, update.output, update.exit_code) == (None, b"bye\n", 0)
    assert len(table) == 0


async def test_feeding_a_process_that_ended_since_gives_its_last_output_and_exit(
    module_session: Any,
) -> None:
    table = ProcessTable()
    process_id, _ = await table.astart(
        module_session, ["sh", "-c", "sleep 0.5; echo late; exit 4"], wait=0.1
    )
    assert process_id is not None
    await asyncio.sleep(1.5)
    update = await table.afeed(process_id, b"ignored\n", wait=0.2)
    assert (update.output, update.exit_code) == (b"late\n", 4)
    assert process_id not in table


async def test_past_the_limit_the_least_recently_used_unprotected_one_ends(
    module_session: Any,
) -> None:
    table = ProcessTable(limit=3, protected_recent=1)
    tokens = [f"table-{index}-{uuid.uuid4().hex[:6]}" for index in range(5)]
    ids = []
    try:
        for token in tokens[:3]:
            ids.append((await table.astart(module_session, sleeper(token), wait=0.1))[0])
        await table.afeed(ids[0], b"", wait=0)  # the first is now the most recently used...
        await table.afeed(ids[2], b"", wait=0)  # ...but the third, more recent, is protected
        ids.append((await table.astart(module_session, sleeper(tokens[3]), wait=0.1))[0])
        assert await gone(tokens[1])  # the least recently used
        assert ids[1] not in table
        assert len(table) == 3
        assert all(pids_carrying(token) for token in (tokens[0], tokens[2], tokens[3]))
        assert len(set(ids)) == 4  # numbers are never reused
    finally:
        await table.aterminate_all()
    assert len(table) == 0
    for token in tokens[:4]:
        assert await gone(token)


async def test_a_process_whose_end_fails_stays_kept_and_a_later_call_ends_it(
    module_session: Any, lizard_counters: LocalServer
) -> None:
    table = ProcessTable()
    tokens = [f"unended-{index}-{uuid.uuid4().hex[:6]}" for index in range(2)]
    ids = [(await table.astart(module_session, sleeper(token), wait=0.1))[0] for token in tokens]
    try:
        lizard_counters.reset_counters()
        lizard_counters.inject_fault(EXEC, status=503, count=1)  # the first one's end fails
        with pytest.raises(TransientError) as caught:
            await table.aterminate_all()
        assert lizard_counters.counters()["routes"][EXEC] == 2  # the second was still tried
        assert "1 kept process(es) could not be ended" in "".join(caught.value.__notes__)
        assert ids[0] in table  # kept under its number, for a later call
        assert ids[1] not in table
        assert await gone(tokens[1])
        assert pids_carrying(tokens[0])  # still running: it was not forgotten
    finally:
        await table.aterminate_all()
    assert len(table) == 0
    assert await gone(tokens[0])


async def test_a_pruned_process_whose_end_fails_stays_kept_and_the_next_start_ends_it(
    module_session: Any, lizard_counters: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    table = ProcessTable(limit=2, protected_recent=1)
    tokens = [f"unpruned-{index}-{uuid.uuid4().hex[:6]}" for index in range(4)]
    ids = [(await table.astart(module_session, sleeper(t), wait=0.1))[0] for t in tokens[:2]]
    try:
        # The third start's own request succeeds; the end of the one it prunes fails. The fault
        # goes in while the start waits in the guest (3 s), so it meets the next request: the end.
        start = asyncio.create_task(table.astart(module_session, sleeper(tokens[2]), wait=3))
        for _ in range(100):
            if pids_carrying(tokens[2]) or start.done():
                break
            await asyncio.sleep(0.05)
        assert not start.done(), "the start returned before the fault could be set up"
        lizard_counters.reset_counters()
        lizard_counters.inject_fault(EXEC, status=503, count=1)
        with caplog.at_level("WARNING", logger="lizard_core.process_table"):
            third, update = await start
        assert lizard_counters.counters()["routes"][EXEC] == 1  # since the start's: the failed end
        assert third is not None  # the start itself succeeded
        assert update.exit_code is None
        assert ids[0] in table  # the pruned one stays kept under its number...
        assert pids_carrying(tokens[0])  # ...and still runs: it was not forgotten
        assert len(table) == 3  # over the limit until an end succeeds
        assert any(str(ids[0]) in record.getMessage() for record in caplog.records)
        # The next start ends the least recently used ones until the table is within the limit.
        fourth, _ = await table.astart(module_session, sleeper(tokens[3]), wait=0.1)
        assert await gone(tokens[0])
        assert await gone(tokens[1])
        assert ids[0] not in table
        assert ids[1] not in table
        assert (third in table, fourth in table, len(table)) == (True, True, 2)
    finally:
        await table.aterminate_all()
    assert len(table) == 0
    for token in tokens:
        assert await gone(token)


async def test_processes_of_a_sandbox_already_gone_count_as_ended(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    table = ProcessTable()
    session = Session(sandbox_config)
    try:
        process_id, _ = await table.astart(session, sleeper(uuid.uuid4().hex), wait=0.1)
        assert process_id in table
        lizard_local.expire(str(session.sandbox_id))
        await table.aterminate_all()  # no error: the sandbox ended them
        assert len(table) == 0
    finally:
        await session.adestroy()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        ProcessTable(limit=0)
    with pytest.raises(ValueError, match="protected_recent"):
        ProcessTable(limit=2, protected_recent=2)
